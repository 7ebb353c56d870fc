"""The Real-Gated Linear Recurrent Unit of Griffin (De et al. 2024): a gated diagonal linear recurrence."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq._validation import check_float, shape_error
from keras_seq.layers.recurrent import backend
from keras_seq.layers.recurrent.kernel_cell import KernelCell, KernelRNN
from keras_seq.layers.recurrent.rnn import LoopHints

# σ(Λ)^c is drawn uniformly in this range when the layer is built (De et al.).
_DECAY_RANGE = (0.9, 0.999)
# Below this value of 1 − a², the gradient of √(1 − a²) is that of
# √(floor), 1000: recurrentgemma bounds it the same way (forward unchanged).
_SQRT_GRADIENT_FLOOR = 2.5e-7


def _sqrt_bounded_gradient(v):
    """√v, whose gradient is bounded by 1 / (2√floor) near v = 0 (where √'s is infinite)."""
    floored = ops.maximum(v, _SQRT_GRADIENT_FLOOR)
    return ops.sqrt(floored) + ops.stop_gradient(ops.sqrt(v) - ops.sqrt(floored))


@keras.saving.register_keras_serializable(package="keras_seq")
class RGLRUCell(KernelCell):
    """One step of the Real-Gated Linear Recurrent Unit (Griffin).

    ```
    r   = σ(W_a x + b_a)                  recurrence gate
    i   = σ(W_x x + b_x)                  input gate
    log a_t = c · r ⊙ log σ(Λ)            (c = 8 by default)
    h_t = a_t ⊙ h_{t-1} + √(1 − a_t²) ⊙ (i ⊙ x)
    ```

    The input width must equal ``units``. Λ (``a_param``) starts so that
    σ(Λ)^c is uniform in [0.9, 0.999]. 1 − a² is computed as −2t / (1 − t),
    t = tanh(log a) (= −expm1(2 log a), exact for a close to 1), and its
    square root with a gradient bounded
    near a = 1 as in recurrentgemma (the forward value is unchanged). The
    update is linear in the state: a linear cell, whose ``step`` (inference,
    streaming, export) and parallel form (one scan over time, what `RNN`
    trains with) the base class derives from ``coefficients``. Weights:
    ``recurrence_gate_kernel (u, u)``, ``recurrence_gate_bias (u,)``,
    ``input_gate_kernel (u, u)``, ``input_gate_bias (u,)``, ``a_param (u,)``.
    State ``[h]``, starting at zero.

    Args:
        units: int, width of h and of the input.
        c: float > 0, the scale of log a. Default 8.
        **kwargs: ``kernel_initializer``, ``bias_initializer``, ``*_regularizer``
            and ``*_constraint`` of the two gates' kernels and biases, as in
            `KernelCell`; ``seed``, int or None, also seeds Λ's initial values.

    Examples:
        >>> import numpy as np
        >>> from keras_seq.layers import RGLRUCell, RNN
        >>> RNN(RGLRUCell(4))(np.ones((2, 5, 4), "float32")).shape
        TensorShape([2, 4])

    References:
        De et al., "Griffin: Mixing Gated Linear Recurrences with Local
        Attention for Efficient Language Models", 2024.
    """

    loop_hints = LoopHints(pointwise_projection=True)

    def __init__(self, units: int, c: float = 8.0, **kwargs):
        super().__init__(units, **kwargs)
        self.c = check_float(type(self).__name__, "c", c, low=0.0, low_inclusive=False)
        self.state_size = self.units

    def build(self, input_shape):
        features = self.input_width(input_shape)
        if features != self.units:
            raise shape_error(self, "inputs",
                              f"{self.units} features (the input width equals `units`)",
                              input_shape)
        u = self.units
        self.recurrence_gate_kernel = self.add_kernel("recurrence_gate_kernel", (u, u))
        self.recurrence_gate_bias = self.add_bias("recurrence_gate_bias", (u,))
        self.input_gate_kernel = self.add_kernel("input_gate_kernel", (u, u))
        self.input_gate_bias = self.add_bias("input_gate_bias", (u,))
        self.a_param = self.add_weight(shape=(u,), name="a_param",
                                       initializer=self._a_param_initializer)
        self.built = True

    def _a_param_initializer(self, shape, dtype=None):
        low, high = _DECAY_RANGE
        decay = keras.random.uniform(shape, low, high, dtype="float32", seed=self.seed_generator)
        s = ops.power(decay, 1.0 / self.c)  # σ(Λ)
        return ops.cast(ops.log(s) - ops.log1p(-s), dtype or "float32")

    def project(self, sequence):
        """``[x W_a + b_a, x W_x + b_x, x]`` for every step."""
        kernel = ops.concatenate([self.recurrence_gate_kernel, self.input_gate_kernel], axis=1)
        bias = ops.concatenate([self.recurrence_gate_bias, self.input_gate_bias])
        gates = backend.project(sequence, kernel, bias)
        # The last axis by its index: tf2onnx cannot place a negative axis
        # where it knows no shapes (inside a streaming model's loop).
        return ops.concatenate([gates, ops.cast(sequence, gates.dtype)],
                               axis=len(sequence.shape) - 1)

    def coefficients(self, projected):
        """``(a, b)`` of h_t = a ⊙ h_{t-1} + b."""
        r_pre, i_pre, x = backend.split(projected, 3)
        log_sigma = -ops.softplus(-ops.cast(self.a_param, x.dtype))  # log σ(Λ)
        log_a = self.c * ops.sigmoid(r_pre) * log_sigma
        # 1 − a² = −expm1(2 log a) = −2t / (1 − t) with t = tanh(log a): exact
        # for a close to 1, from ops that TFLite and ONNX have (ONNX has no expm1).
        t = ops.tanh(log_a)
        multiplier = _sqrt_bounded_gradient(-2.0 * t / (1.0 - t))  # √(1 − a²)
        return ops.exp(log_a), multiplier * (ops.sigmoid(i_pre) * x)

    def get_config(self):
        return {**super().get_config(), "c": self.c}


@keras.saving.register_keras_serializable(package="keras_seq")
class RGLRU(KernelRNN):
    """The RG-LRU layer of Griffin (`RGLRUCell` over time): trains as a parallel scan.

    In training (``training=True``) the whole sequence is one linear scan over
    time (`RGLRUCell.parallel`); at inference, and in streaming and export, the
    cell runs step by step. The scan is a loop of one multiply-add per step on
    a CPU and a log-depth parallel scan on a GPU (chosen when traced:
    docs/contract.md, "Which form runs where"). The input width must equal
    ``units`` (in Griffin's recurrent block a Dense layer and a causal
    convolution come first: `keras_seq.models.language_model(kind="rglru")`).
    Masks, ``initial_state``, ``go_backwards``, ``return_state``, ``stateful``,
    `keras.layers.Bidirectional` and mixed precision work as for `GRU`.

    Args:
        units: int, width of h and of the input.
        **kwargs: `keras_seq.layers.RNN`'s ``return_sequences``,
            ``return_state``, ``go_backwards``, ``stateful`` and ``unroll``;
            the cell's ``c`` (the scale of log a, default 8), ``kernel_initializer``, ``bias_initializer``,
            ``*_regularizer``, ``*_constraint`` and ``seed``: `RGLRUCell`.

    Call arguments: ``inputs (B, T, units)``, ``mask (B, T)``, ``training``,
    ``initial_state`` ``[h]``.

    Examples:
        >>> import numpy as np
        >>> from keras_seq.layers import RGLRU
        >>> RGLRU(8, return_sequences=True)(np.zeros((2, 5, 8), "float32")).shape
        TensorShape([2, 5, 8])

    References:
        De et al., "Griffin: Mixing Gated Linear Recurrences with Local
        Attention for Efficient Language Models", 2024.
    """

    cell_class = RGLRUCell

