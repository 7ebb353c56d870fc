"""The mLSTM of xLSTM (Beck et al. 2024): a matrix memory that trains in parallel over time."""

from __future__ import annotations

import math

import keras
from keras import ops

from keras_seq.layers.recurrent import backend
from keras_seq.layers.recurrent.kernel_cell import KernelCell, KernelRNN, exponential_gates
from keras_seq.layers.recurrent.rnn import LoopHints
from keras_seq.layers.recurrent.s_lstm import check_heads

# Steps per chunk of the parallel form: a (chunk × chunk) decay matrix per
# head within a chunk, the recurrence across chunks (benchmarks/RESULTS.md,
# "Parallel recurrences", chose the length).
CHUNK = 64


def _segment_sums(x):
    """``S[..., t, s] = x[..., s+1] + … + x[..., t]`` for s ≤ t, −inf above
    the diagonal, from ``x (..., L)`` with a static L: summed step by step
    rather than as a difference of two cumulative sums, which would lose the
    small sums of a long chunk to round-off."""
    steps = x.shape[-1]
    rows = ops.arange(steps)[:, None]  # r
    cols = ops.arange(steps)[None, :]  # s
    terms = ops.where(rows > cols, ops.expand_dims(x, -1), ops.zeros_like(x)[..., None])
    sums = ops.cumsum(terms, axis=-2)  # [t, s] = Σ_{s < r ≤ t} x_r
    return ops.where(rows >= cols, sums, ops.full_like(sums, -math.inf))


@keras.saving.register_keras_serializable(package="keras_seq")
class MLSTMCell(KernelCell):
    """One step of the mLSTM (xLSTM's matrix-memory LSTM).

    With H = ``num_heads`` heads of d = u / H units, per head:

    ```
    q = x W_q,  k = x W_k / √d,  v = x W_v,  ĩ, f̃ = x W_g + b_g (one each per head)
    o = σ(x W_o + b_o)
    log f = −softplus(−f̃),  m_t = max(log f + m_{t-1}, ĩ)
    i' = exp(ĩ − m_t),  f' = exp(log f + m_{t-1} − m_t)
    C_t = f' C_{t-1} + i' v kᵀ,   n_t = f' n_{t-1} + i' k
    h̃ = C_t q / max(|n_tᵀ q|, exp(−m_t)),   h = o ⊙ h̃   (heads side by side)
    ```

    In training `RNN` runs `parallel`, the same numbers over the whole
    sequence: within chunks of `CHUNK` steps the paper's parallel form (a
    causal matrix of decays D[t, s] = exp(Σ_{s<r≤t} log f_r + ĩ_s − m_t),
    with the state before the chunk as one more source), across chunks the
    recurrence of C, n and m; ``step`` runs at inference, in streaming and
    in export. Weights: ``query_kernel (in, u)``, ``key_kernel (in, u)``,
    ``value_kernel (in, u)``, ``gate_kernel (in, 2H)`` (columns ĩ of each
    head, then f̃ of each head), ``gate_bias (2H,)``, ``output_kernel (in,
    u)``, ``output_bias (u,)``. States ``[C (B, H·d·d), n (B, H·d), m (B,
    H)]``, head by head, C row-major with C[a, b] = Σ i' v_a k_b; all start
    at zero.

    Args:
        units: int, width of h (H·d).
        num_heads: int dividing ``units``. Default 1.
        forget_bias_initializer: initializer of the f̃ half of
            ``gate_bias``; None: ``bias_initializer``.
        **kwargs: ``kernel_initializer``, ``bias_initializer``, ``*_regularizer``,
            ``*_constraint`` and ``seed``, as in `KernelCell`.

    Examples:
        >>> import numpy as np
        >>> from keras_seq.layers import MLSTMCell, RNN
        >>> RNN(MLSTMCell(4, num_heads=2))(np.ones((2, 5, 3), "float32")).shape
        TensorShape([2, 4])

    References:
        Beck et al., "xLSTM: Extended Long Short-Term Memory", 2024.
    """

    loop_hints = LoopHints(pointwise_projection=True)

    def __init__(self, units: int, num_heads: int = 1, forget_bias_initializer=None,
                 **kwargs):
        super().__init__(units, **kwargs)
        self.num_heads = check_heads(type(self).__name__, self.units, num_heads)
        self.head_dim = self.units // self.num_heads
        self.forget_bias_initializer = (
            None if forget_bias_initializer is None
            else keras.initializers.get(forget_bias_initializer)
        )
        heads, d = self.num_heads, self.head_dim
        self.state_size = [heads * d * d, heads * d, heads]

    def build(self, input_shape):
        features = self.input_width(input_shape)
        u, heads = self.units, self.num_heads
        self.query_kernel = self.add_kernel("query_kernel", (features, u))
        self.key_kernel = self.add_kernel("key_kernel", (features, u))
        self.value_kernel = self.add_kernel("value_kernel", (features, u))
        self.gate_kernel = self.add_kernel("gate_kernel", (features, 2 * heads))
        forget = self.forget_bias_initializer or self.bias_initializer

        def gate_bias_initializer(shape, dtype=None):
            return ops.concatenate([self.bias_initializer((heads,), dtype=dtype),
                                    forget((heads,), dtype=dtype)])

        self.gate_bias = self.add_bias("gate_bias", (2 * heads,), gate_bias_initializer)
        self.output_kernel = self.add_kernel("output_kernel", (features, u))
        self.output_bias = self.add_bias("output_bias", (u,))
        self.built = True

    def project(self, sequence):
        """``[x W_q, x W_k, x W_v, x W_g + b_g, x W_o + b_o]`` for every step."""
        kernel = ops.concatenate([self.query_kernel, self.key_kernel, self.value_kernel,
                                  self.gate_kernel, self.output_kernel], axis=1)
        bias = ops.concatenate([ops.zeros((3 * self.units,), self.gate_bias.dtype),
                                self.gate_bias, self.output_bias])
        return backend.project(sequence, kernel, bias)

    def _split(self, projected):
        """``q, k, v (..., H, d)``, ``ĩ, f̃ (..., H)``, ``o (..., u)``."""
        u, heads, d = self.units, self.num_heads, self.head_dim
        q, k, v, i_pre, f_pre, o_pre = backend.split(projected, [u, u, u, heads, heads, u])
        lead = tuple(ops.shape(projected)[:-1])
        q, k, v = (ops.reshape(t, (*lead, heads, d)) for t in (q, k, v))
        return q, k * (1.0 / math.sqrt(d)), v, i_pre, f_pre, ops.sigmoid(o_pre)

    def _unflatten(self, states):
        heads, d = self.num_heads, self.head_dim
        C, n, m = states
        return ops.reshape(C, (-1, heads, d, d)), ops.reshape(n, (-1, heads, d)), m

    def _flatten(self, C, n, m):
        heads, d = self.num_heads, self.head_dim
        return [ops.reshape(C, (-1, heads * d * d)), ops.reshape(n, (-1, heads * d)), m]

    def step(self, inputs, states, training=False):
        q, k, v, i_pre, f_pre, o = self._split(inputs)  # (B, H, d), (B, H)
        C, n, m = self._unflatten(states)
        i, f, m = exponential_gates(i_pre, f_pre, m)
        # Axes added with expand_dims, not [..., None]: tf2onnx cannot convert
        # an ellipsis where it lost the rank (the step inside an ONNX If).
        f, i = ops.expand_dims(f, -1), ops.expand_dims(i, -1)  # (B, H, 1)
        C = (ops.expand_dims(f, -1) * C
             + ops.expand_dims(i, -1) * (ops.expand_dims(v, -1) * ops.expand_dims(k, -2)))
        n = f * n + i * k
        numerator = ops.sum(C * ops.expand_dims(q, -2), axis=-1)  # C q: (B, H, d)
        denominator = ops.maximum(ops.abs(ops.sum(n * q, axis=-1)), ops.exp(-m))
        h = o * ops.reshape(numerator / ops.expand_dims(denominator, -1), (-1, self.units))
        return h, self._flatten(C, n, m)

    def parallel(self, inputs, states, mask=None, training=False):
        q, k, v, i_pre, f_pre, o = self._split(inputs)  # (B, T, H, d), (B, T, H)
        log_f = -ops.softplus(-f_pre)
        if mask is not None:  # a masked step carries every state: f' = 1, i' = 0
            keep = ops.expand_dims(mask, -1)
            log_f = ops.where(keep, log_f, ops.zeros_like(log_f))
            i_pre = ops.where(keep, i_pre, ops.full_like(i_pre, -math.inf))
        # Heads first: (B, H, T, d) and (B, H, T).
        q, k, v = (ops.transpose(t, (0, 2, 1, 3)) for t in (q, k, v))
        i_pre, log_f = (ops.transpose(t, (0, 2, 1)) for t in (i_pre, log_f))
        C, n, m = self._unflatten(states)
        steps = inputs.shape[1]
        if steps is not None and steps <= CHUNK:
            h, C, n, m = _chunk(q, k, v, i_pre, log_f, C, n, m)
        else:
            h, C, n, m = _chunks(q, k, v, i_pre, log_f, C, n, m, training)
        h = ops.reshape(ops.transpose(h, (0, 2, 1, 3)), (*tuple(ops.shape(o)[:2]), self.units))
        return o * h, self._flatten(C, n, m)

    def get_config(self):
        initializer = self.forget_bias_initializer
        return {**super().get_config(), "num_heads": self.num_heads,
                "forget_bias_initializer": None if initializer is None
                else keras.initializers.serialize(initializer)}


def _chunk(q, k, v, i_pre, log_f, C0, n0, m0):
    """The parallel form over ``L`` steps from the states ``(C0, n0, m0)``:
    ``(h̃ (B, H, L, d), C, n, m after the last step)``.

    With F_t = Σ_{r≤t} log f_r, the state before the chunk is one more
    source of log weight F_t + m0; m_t, the largest log weight of row t, is
    the recurrent m_t (so every state matches ``step``'s).
    """
    log_d = _segment_sums(log_f) + i_pre[..., None, :]  # (B, H, L, L): [t, s]
    log_initial = ops.cumsum(log_f, axis=-1) + m0[..., None]  # (B, H, L)
    m = ops.maximum(ops.max(log_d, axis=-1), log_initial)
    decay = ops.exp(log_d - m[..., None])
    initial = ops.exp(log_initial - m)
    scores = backend.matmul(q, k, transpose_b=True) * decay  # (B, H, L, L)
    numerator = backend.matmul(scores, v) + initial[..., None] * backend.matmul(
        q, C0, transpose_b=True)
    dot = ops.sum(scores, axis=-1) + initial * ops.sum(q * n0[..., None, :], axis=-1)
    h = numerator / ops.maximum(ops.abs(dot), ops.exp(-m))[..., None]
    last = decay[..., -1, :, None]  # (B, H, L, 1): row L of the decays
    C = backend.matmul(v * last, k, transpose_a=True) + initial[..., -1, None, None] * C0
    n = ops.sum(k * last, axis=-2) + initial[..., -1, None] * n0
    return h, C, n, m[..., -1]


def _chunks(q, k, v, i_pre, log_f, C, n, m, training):
    """`_chunk` over every `CHUNK` steps, the states carried from chunk to
    chunk by the backend's loop; the last chunk padded with steps that carry
    the states."""
    steps = ops.shape(q)[2]
    pad = (-steps) % CHUNK
    batch, heads, _, d = ops.shape(q)

    def padded(x, value):
        shape = (batch, heads, pad, *x.shape[3:])
        return ops.concatenate([x, ops.full(shape, value, dtype=x.dtype)], axis=2)

    q, k, v = padded(q, 0.0), padded(k, 0.0), padded(v, 0.0)
    i_pre, log_f = padded(i_pre, -math.inf), padded(log_f, 0.0)

    def chunked(x):  # (B, H, N·L, ...) -> (N, B, H, L, ...)
        x = ops.reshape(x, (batch, heads, -1, CHUNK, *x.shape[3:]))
        return ops.moveaxis(x, 2, 0)

    def body(xs, carry):
        h, C, n, m = _chunk(*xs, *carry)
        return [h], [C, n, m]

    template = ops.zeros((batch, heads, CHUNK, d), q.dtype)
    outputs, (C, n, m) = backend.scan(
        body, [chunked(t) for t in (q, k, v, i_pre, log_f)], [C, n, m], [template],
        collect=True, training=training, steps_per_iteration=1,
    )
    h = outputs[0]  # (B, N, H, L, d)
    h = ops.reshape(ops.moveaxis(h, 1, 2), (batch, heads, -1, d))
    return h[:, :, :steps], C, n, m


@keras.saving.register_keras_serializable(package="keras_seq")
class MLSTM(KernelRNN):
    """The mLSTM layer of xLSTM (`MLSTMCell` over time): trains in parallel over time.

    In training (``training=True``) it runs the parallel form
    (`MLSTMCell.parallel`: decay matrices within chunks of
    `keras_seq.layers.recurrent.m_lstm.CHUNK` steps, the recurrence across
    them); at inference, and in streaming and export, the recurrent form
    step by step. Masks, ``initial_state``, ``go_backwards``,
    ``return_state``, ``stateful``, `keras.layers.Bidirectional` and mixed
    precision work as for `GRU`.

    Args:
        units: int, width of h.
        **kwargs: `keras_seq.layers.RNN`'s ``return_sequences``,
            ``return_state``, ``go_backwards``, ``stateful`` and ``unroll``;
            the cell's ``num_heads`` (dividing ``units``, default 1), ``forget_bias_initializer``, ``kernel_initializer``, ``bias_initializer``,
            ``*_regularizer``, ``*_constraint`` and ``seed``: `MLSTMCell`.

    Call arguments: ``inputs (B, T, in)``, ``mask (B, T)``, ``training``,
    ``initial_state`` ``[C, n, m]``.

    Examples:
        >>> import numpy as np
        >>> from keras_seq.layers import MLSTM
        >>> output, C, n, m = MLSTM(8, num_heads=2, return_state=True)(
        ...     np.zeros((2, 5, 3), "float32"))
        >>> output.shape, C.shape, n.shape, m.shape
        (TensorShape([2, 8]), TensorShape([2, 32]), TensorShape([2, 8]), TensorShape([2, 2]))

    References:
        Beck et al., "xLSTM: Extended Long Short-Term Memory", 2024.
    """

    cell_class = MLSTMCell
