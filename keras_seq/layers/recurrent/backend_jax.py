"""The recurrent loop's operations on JAX (`keras_seq.layers.recurrent.backend` picks them).

The same operations as `backend_tensorflow.TensorFlowOps`. The loop is
``jax.lax.scan``; autodiff of the scan trains it and XLA compiles it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import jax
from keras import ops
from keras.src.backend.common import stateless_scope

BodyFn = Callable[[list, list], tuple]


def _dtype_keeping_matmul(a, b):
    # ops.einsum for float64: Keras' matmul type promotion computes float64
    # operands in float32 on some backends; the einsum keeps the dtype.
    if a.dtype == "float64":
        return ops.einsum("...ij,...jk->...ik", a, b)
    return ops.matmul(a, b)


class JaxOps:
    """The recurrent loop's operations on JAX."""

    @staticmethod
    def project(x, kernel, bias=None):
        """``x @ kernel + bias`` over the last axis."""
        y = _dtype_keeping_matmul(x, kernel)
        return y if bias is None else y + bias

    @staticmethod
    def recurrent_matmul(h, kernel, bias):
        """``h @ kernel + bias`` for one step."""
        y = _dtype_keeping_matmul(h, kernel)
        return y if bias is None else y + bias

    @staticmethod
    def matmul(a, b, transpose_a: bool = False, transpose_b: bool = False):
        """A batched matmul with optional transposes of the last two axes."""
        if transpose_a:
            a = ops.swapaxes(a, -1, -2)
        if transpose_b:
            b = ops.swapaxes(b, -1, -2)
        return _dtype_keeping_matmul(a, b)

    @staticmethod
    def split(x, sizes: Sequence[int] | int, axis: int = -1) -> list:
        """``x`` split into pieces of the static ``sizes`` (or ``sizes`` equal pieces)."""
        if isinstance(sizes, int):
            return ops.split(x, sizes, axis=axis)
        indices, total = [], 0
        for size in list(sizes)[:-1]:
            total += int(size)
            indices.append(total)
        return ops.split(x, indices, axis=axis)

    @staticmethod
    def layer_norm(v, gamma, beta, epsilon: float):
        """``γ ⊙ (v − mean v) / sqrt(var v + ε) [+ β]`` over the last axis."""
        mean = ops.mean(v, axis=-1, keepdims=True)
        centred = v - mean
        variance = ops.mean(ops.square(centred), axis=-1, keepdims=True)
        normed = centred * ops.rsqrt(variance + epsilon) * gamma
        return normed if beta is None else normed + beta

    @staticmethod
    def compiled_by_xla() -> bool:
        """Always: JAX compiles what it traces with XLA."""
        return True

    @staticmethod
    def device() -> str:
        """``"cpu"`` on JAX's CPU backend, else ``"gpu"`` (GPU or TPU)."""
        return "cpu" if jax.default_backend() == "cpu" else "gpu"

    @staticmethod
    def fresh_states(states: list, stateful: bool) -> list:
        """The initial states as the loop may carry them (as they are)."""
        return states

    @staticmethod
    def export_lowering():
        """None: the exporters are TensorFlow's."""
        return None

    @staticmethod
    def convertible_inference(training) -> bool:
        """Never: the exporters are TensorFlow's (Keras' own loop runs here)."""
        return False

    # Hand-written derivatives are TensorFlow's; JAX differentiates the scan.
    MANUAL_GRADIENT_LOOP = False
    run_manual_gradient = None
    # XLA compiles the lax.scan of a step, its input projection included, into
    # one loop over cache-sized data: on the CPU faster than reading a hoisted
    # (T, B, P) projection, and than the parallel scan of a few elementwise
    # steps (benchmarks/RESULTS.md, "Every backend", "Parallel recurrences").
    FUSED_STEP_LOOP = True

    @staticmethod
    def scan(body: BodyFn, sequences, carry, templates, collect: bool = True, training=None,
             steps_per_iteration: int | None = None):
        """Runs ``body`` over the time-major ``sequences`` with ``jax.lax.scan``
        (arguments and results as `TensorFlowOps.scan`; ``templates`` and
        ``steps_per_iteration`` are not needed here)."""

        def f(carry, xs_t):
            outputs_t, carry = body(list(xs_t), list(carry))
            return carry, (outputs_t if collect else None)

        # Inside a trace a variable update would leak out of the scan: run it
        # in a stateless scope (the caller's, if there is one), as Keras does.
        scope = (contextlib.nullcontext() if stateless_scope.in_stateless_scope()
                 else stateless_scope.StatelessScope())
        with scope:
            carry, stacked = jax.lax.scan(f, list(carry), list(sequences))
        if not collect:
            return None, list(carry)
        return [ops.swapaxes(y, 0, 1) for y in stacked], list(carry)

    @staticmethod
    def linear_scan(a, b, h0):
        """``h_t = a_t ⊙ h_{t-1} + b_t`` over axis 1 of ``(B, T, n)`` arrays,
        from ``h0 (B, n)``; returns ``h (B, T, n)``.

        On the CPU a ``jax.lax.scan`` of one multiply-add per step (measured
        faster there than the log-depth scan, whose every level is a pass
        over the whole sequence: benchmarks/RESULTS.md, "Parallel
        recurrences"); on a GPU or TPU ``jax.lax.associative_scan`` over
        (a, b) pairs, log-depth in T. Autodiff differentiates either.
        """
        if JaxOps.device() == "cpu":
            def step(h, ab):
                h = ab[0] * h + ab[1]
                return h, h

            _, h = jax.lax.scan(step, h0, (jax.numpy.swapaxes(a, 0, 1),
                                           jax.numpy.swapaxes(b, 0, 1)))
            return jax.numpy.swapaxes(h, 0, 1)
        b = b.at[:, 0].add(a[:, 0] * h0)  # the first step reads h0
        return jax.lax.associative_scan(_compose_affine, (a, b), axis=1)[1]


def _compose_affine(first, second):
    """The affine map h -> a h + b of ``first`` followed by that of ``second``."""
    (a1, b1), (a2, b2) = first, second
    return a1 * a2, a2 * b1 + b2
