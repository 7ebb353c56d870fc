"""A cell's hand-written derivative: the protocol, and the activations it is written with.

A cell may pair its ``step`` with a `ManualGradient` (its
``manual_gradient()`` returns one): the same step written to keep what its
derivative needs, and that derivative in closed form. TensorFlow trains such
a cell with backpropagation through time under XLA
(`keras_seq.layers.recurrent.bptt_tensorflow`), one matmul per step backwards
and the recurrent kernel's gradient as one large matmul after the loop,
where autodiff of the loop is 1.1-1.8x slower (benchmarks/RESULTS.md,
"One formulation per cell"). Each package cell's derivative sits beside its
``step`` in the cell's file, written like it in ``keras.ops`` (so the file
imports no backend), and one generic test checks its values and gradients
against autodiff of ``step`` for every cell that has one.

The activations are `fast_tanh` and `fast_sigmoid`, rational approximations
(within 4e-7 of tanh and sigmoid) that XLA fuses with the rest of a step on
the CPU, where its own tanh and sigmoid cost several times the rest of a
step's elementwise work; `sigmoid_grad` and `tanh_grad` are their
derivatives from the outputs.
"""

from __future__ import annotations

from collections.abc import Sequence

from keras import ops

__all__ = ["ManualGradient", "fast_sigmoid", "fast_tanh", "sigmoid_grad", "tanh_grad"]

# Odd rational approximation of tanh on [-c, c] (c = 7.9053111, where float32
# tanh is ±1): tanh(x) ≈ x·P(x²)/Q(x²), the coefficients of Eigen's float32
# tanh (which TensorFlow's CPU kernels use). Largest error against tanh:
# 4e-7 over [-20, 20].
_TANH_CLAMP = 7.90531110763549805
_TANH_P = (
    -2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
    5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
    4.89352455891786e-03,
)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
           4.89352518554385e-03)


def fast_tanh(x):
    """tanh from multiplies, adds and one division (float64: exact ``tanh``);
    float16 and bfloat16 inputs are evaluated in float32."""
    dtype = ops.dtype(x)
    if dtype == "float64":
        return ops.tanh(x)
    y = ops.clip(ops.cast(x, "float32"), -_TANH_CLAMP, _TANH_CLAMP)
    y2 = y * y
    p = _TANH_P[0]
    for coefficient in _TANH_P[1:]:
        p = p * y2 + coefficient
    q = _TANH_Q[0]
    for coefficient in _TANH_Q[1:]:
        q = q * y2 + coefficient
    return ops.cast(y * p / q, dtype)


def fast_sigmoid(x):
    """σ(x) = (1 + tanh(x / 2)) / 2 with `fast_tanh`."""
    return 0.5 + 0.5 * fast_tanh(0.5 * x)


def sigmoid_grad(y, dy):
    """``dy ⊙ y ⊙ (1 − y)`` for ``y = σ(x)``."""
    return dy * (y - y * y)


def tanh_grad(y, dy):
    """``dy ⊙ (1 − y²)`` for ``y = tanh(x)``."""
    return dy - dy * (y * y)


class ManualGradient:
    """A cell's step and its derivative in closed form, for training on TensorFlow.

    The cell's ``manual_gradient()`` returns ``TheGradient(self)``. A
    subclass defines:

    - ``supported() -> bool``: whether the derivative holds for the cell's
      configuration (e.g. tanh and sigmoid only). Default False.
    - ``project(xs) -> xw``: the ``(T, B, P)`` input projection of a
      time-major sequence, with the whole bias.
    - ``weights() -> [U, *params]``: the ``(units, P)`` recurrent kernel, then
      the other weights ``forward`` and ``backward`` read (`read` them).
    - ``saved_widths``: the width of each ``(B, width)`` tensor that
      ``forward`` keeps per step.
    - ``d_r_is_d_xw``: True when the gradients of ``xw_t`` and of
      ``r_t = h @ U`` are the same tensor (the loop then keeps one).
    - ``forward(xw_t, r_t, states, params) -> (new_states, saved)``: the
      step; h must be ``new_states[0]``. Written with `fast_sigmoid` and
      `fast_tanh`.
    - ``backward(saved, states_prev, states, d_states, params) -> (d_xw_t,
      d_r_t, d_states_prev, d_params_t)``: from the gradients of the step's
      new states; ``d_r_t`` may be ``d_xw_t`` itself, an entry of
      ``d_states_prev`` may be None (no direct path); ``d_params_t`` are this
      step's per-example ``(B, ...)`` gradients of ``params``.

    The derivative holds for the ``step`` it was written with: a subclass of
    the cell that redefines ``step`` or ``project`` trains with autodiff
    unless it also defines its own ``manual_gradient``
    (`keras_seq.layers.recurrent.rnn.declared_forms`).
    """

    saved_widths: Sequence[int] = ()
    d_r_is_d_xw: bool = False

    def __init__(self, cell):
        self.cell = cell

    def supported(self) -> bool:
        return False

    def read(self, variable):
        """A weight in the cell's compute dtype."""
        return ops.cast(variable, self.cell.compute_dtype)
