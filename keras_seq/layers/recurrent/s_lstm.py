"""The sLSTM of xLSTM (Beck et al. 2024): exponential gating, a normaliser state and head-wise recurrence."""

from __future__ import annotations

import keras
import numpy as np
from keras import constraints, initializers, ops, regularizers

from keras_seq._validation import check_positive_int, invalid_value
from keras_seq.layers.recurrent import backend
from keras_seq.layers.recurrent.kernel_cell import KernelCell, KernelRNN, exponential_gates
from keras_seq.layers.recurrent.rnn import LoopHints


def check_heads(owner, units: int, num_heads) -> int:
    """``num_heads``, a positive integer that divides ``units``."""
    num_heads = check_positive_int(owner, "num_heads", num_heads)
    if units % num_heads:
        raise invalid_value(owner, "num_heads", f"a divisor of units={units}", num_heads)
    return num_heads


@keras.saving.register_keras_serializable(package="keras_seq")
class SLSTMCell(KernelCell):
    """One step of the sLSTM (xLSTM's scalar-memory LSTM).

    With H = ``num_heads`` heads of d = u / H units:

    ```
    [ĩ, f̃, z̃, õ] = x W + b + h_{t-1} R            (R head-wise: block-diagonal)
    log f = −softplus(−f̃),  m_t = max(log f + m_{t-1}, ĩ)
    i' = exp(ĩ − m_t),  f' = exp(log f + m_{t-1} − m_t)
    c_t = f' ⊙ c_{t-1} + i' ⊙ tanh(z̃)
    n_t = f' ⊙ n_{t-1} + i'
    h_t = σ(õ) ⊙ c_t / n_t
    ```

    The stabiliser m keeps every exponential ≤ 1 (no overflow for any
    pre-activation); n_t is floored at the dtype's smallest normal number,
    so a first step whose input gate underflows gives h = 0, not 0/0.
    Recurrent (h_{t-1} enters the gates): it runs step by step, in training
    too. Weights: ``kernel (in, 4u)`` gate blocks i, f, z, o;
    ``recurrent_kernel (H, d, 4, d)``, head j's contribution to gate block
    g (columns j·d … (j+1)·d of the block) being h_{t-1}[:, j·d:(j+1)·d] @
    R[j, :, g, :]; ``bias (4u,)``. States ``[h, c, n, m]``, each ``(B, u)``,
    starting at zero.

    Args:
        units: int, width of each state.
        num_heads: int dividing ``units``. Default 1.
        recurrent_initializer: default ``"orthogonal"``.
        recurrent_regularizer: optional.
        recurrent_constraint: optional.
        **kwargs: ``kernel_initializer``, ``bias_initializer``, ``*_regularizer``,
            ``*_constraint`` and ``seed``, as in `KernelCell`.

    Examples:
        >>> import numpy as np
        >>> from keras_seq.layers import SLSTMCell, RNN
        >>> RNN(SLSTMCell(4, num_heads=2))(np.ones((2, 5, 3), "float32")).shape
        TensorShape([2, 4])

    References:
        Beck et al., "xLSTM: Extended Long Short-Term Memory", 2024.
    """

    loop_hints = LoopHints(pointwise_projection=True, output_is_first_state=True)

    def __init__(self, units: int, num_heads: int = 1, recurrent_initializer="orthogonal",
                 recurrent_regularizer=None, recurrent_constraint=None, **kwargs):
        super().__init__(units, **kwargs)
        self.num_heads = check_heads(type(self).__name__, self.units, num_heads)
        self.recurrent_initializer = initializers.get(recurrent_initializer)
        self.recurrent_regularizer = regularizers.get(recurrent_regularizer)
        self.recurrent_constraint = constraints.get(recurrent_constraint)
        self.state_size = [self.units] * 4

    def build(self, input_shape):
        features = self.input_width(input_shape)
        u, heads = self.units, self.num_heads
        d = u // heads
        self.kernel = self.add_kernel("kernel", (features, 4 * u))
        self.recurrent_kernel = self.add_weight(
            shape=(heads, d, 4, d), name="recurrent_kernel",
            initializer=self.recurrent_initializer, regularizer=self.recurrent_regularizer,
            constraint=self.recurrent_constraint,
        )
        self.bias = self.add_bias("bias", (4 * u,))
        self.built = True

    def project(self, sequence):
        """``x W + b``: the input part of the four gates for every step."""
        return backend.project(sequence, self.kernel, self.bias)

    def recurrent_part(self, h):
        """``h_{t-1} R`` head by head, in the kernel's column order (gate, head, unit)."""
        heads = self.num_heads
        d = self.units // heads
        h_heads = ops.transpose(ops.reshape(h, (-1, heads, d)), (1, 0, 2))  # (H, B, d)
        r = ops.reshape(self.recurrent_kernel, (heads, d, 4 * d))
        out = backend.matmul(h_heads, ops.cast(r, h.dtype))  # (H, B, 4d)
        out = ops.reshape(out, (heads, -1, 4, d))
        return ops.reshape(ops.transpose(out, (1, 2, 0, 3)), (-1, 4 * self.units))  # (B, 4u)

    def step(self, inputs, states, training=False):
        h, c, n, m = states
        i_pre, f_pre, z_pre, o_pre = backend.split(inputs + self.recurrent_part(h), 4)
        i, f, m = exponential_gates(i_pre, f_pre, m)
        c = f * c + i * ops.tanh(z_pre)
        n = f * n + i
        tiny = float(np.finfo(keras.backend.standardize_dtype(n.dtype)).tiny)
        n_floor = ops.maximum(n, tiny)
        # c / n as (c / s) / (n / s) with s = n held constant: the same value,
        # and a gradient without 1/n², which underflows when the input gate
        # is small (n = exp(ĩ − m) ≈ exp(−80) on a first step).
        scale = ops.stop_gradient(n_floor)
        h = ops.sigmoid(o_pre) * (c / scale) / (n_floor / scale)
        return h, [h, c, n, m]

    def get_config(self):
        config = {
            "num_heads": self.num_heads,
            "recurrent_initializer": initializers.serialize(self.recurrent_initializer),
            "recurrent_regularizer": regularizers.serialize(self.recurrent_regularizer),
            "recurrent_constraint": constraints.serialize(self.recurrent_constraint),
        }
        return {**super().get_config(), **config}


@keras.saving.register_keras_serializable(package="keras_seq")
class SLSTM(KernelRNN):
    """The sLSTM layer of xLSTM (`SLSTMCell` over time).

    Recurrent: it runs the package's loop step by step, in training too (the
    loop of `keras_seq.layers.RNN` on every backend). Masks,
    ``initial_state``, ``go_backwards``, ``return_state``, ``stateful``,
    `keras.layers.Bidirectional`, streaming and export work as for `GRU`.

    Args:
        units: int, width of each state.
        **kwargs: `keras_seq.layers.RNN`'s ``return_sequences``,
            ``return_state``, ``go_backwards``, ``stateful`` and ``unroll``;
            the cell's ``num_heads`` (dividing ``units``, default 1), ``recurrent_*``, ``kernel_initializer``, ``bias_initializer``,
            ``*_regularizer``, ``*_constraint`` and ``seed``: `SLSTMCell`.

    Call arguments: ``inputs (B, T, in)``, ``mask (B, T)``, ``training``,
    ``initial_state`` ``[h, c, n, m]``.

    Examples:
        >>> import numpy as np
        >>> from keras_seq.layers import SLSTM
        >>> output, h, c, n, m = SLSTM(8, num_heads=2, return_state=True)(
        ...     np.zeros((2, 5, 3), "float32"))
        >>> output.shape, m.shape
        (TensorShape([2, 8]), TensorShape([2, 8]))

    References:
        Beck et al., "xLSTM: Extended Long Short-Term Memory", 2024.
    """

    cell_class = SLSTMCell
