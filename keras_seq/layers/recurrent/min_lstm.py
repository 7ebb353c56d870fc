"""minLSTM (Feng et al. 2024): an LSTM whose gates read the input only, so it trains as a scan."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq.layers.recurrent import backend
from keras_seq.layers.recurrent.kernel_cell import (
    KernelCell,
    KernelRNN,
    negated,
    positive_candidate,
)
from keras_seq.layers.recurrent.rnn import LoopHints


@keras.saving.register_keras_serializable(package="keras_seq")
class MinLSTMCell(KernelCell):
    """One step of the minimal LSTM.

    ```
    f   = σ(W_f x + b_f),  i = σ(W_i x + b_i),  h̃ = g(W_h x + b_h)
    f'  = f / (f + i),     i' = i / (f + i)
    h_t = f' ⊙ h_{t-1} + i' ⊙ h̃
    ```

    with g(v) = v + 0.5 (v ≥ 0), σ(v) (v < 0). The normalised gates are
    computed as f' = σ(log f − log i) and i' = σ(log i − log f) (log σ(v) =
    −softplus(−v)): the same numbers, without 0/0 when both gates underflow.
    The update is linear in the state (a_t = f', b_t = i' ⊙ h̃): a linear
    cell, whose ``step`` (inference, streaming, export) and parallel form
    (one scan over time, what `RNN` trains with) the base class derives from
    ``coefficients``.
    Weights: ``kernel (in, 3u)``, columns f, i, h̃, and ``bias (3u,)``. State
    ``[h]``, starting at zero.

    Args:
        units: int, width of h.
        **kwargs: ``kernel_initializer``, ``bias_initializer``, ``*_regularizer``,
            ``*_constraint`` and ``seed``, as in `KernelCell`.

    Examples:
        >>> import numpy as np
        >>> from keras_seq.layers import MinLSTMCell, RNN
        >>> RNN(MinLSTMCell(4))(np.ones((2, 5, 3), "float32")).shape
        TensorShape([2, 4])

    References:
        Feng, Tung, Ahmed, Bengio & Hajimirsadeghi, "Were RNNs All We
        Needed?", 2024.
    """

    loop_hints = LoopHints(pointwise_projection=True, steps_fuse_on_cpu=True)

    def __init__(self, units: int, **kwargs):
        super().__init__(units, **kwargs)
        self.state_size = self.units

    def build(self, input_shape):
        features = self.input_width(input_shape)
        self.kernel = self.add_kernel("kernel", (features, 3 * self.units))
        self.bias = self.add_bias("bias", (3 * self.units,))
        self.built = True

    def project(self, sequence):
        """``x W + b``: the pre-activations of f, i and h̃ for every step."""
        return backend.project(sequence, self.kernel, self.bias)

    def coefficients(self, projected):
        """``(a, b) = (f', i' ⊙ h̃)`` of h_t = a ⊙ h_{t-1} + b."""
        f_pre, i_pre, h_pre = backend.split(projected, 3)
        # log f − log i = softplus(−ĩ) − softplus(−f̃).
        log_ratio = ops.softplus(negated(i_pre)) - ops.softplus(negated(f_pre))
        return ops.sigmoid(log_ratio), ops.sigmoid(negated(log_ratio)) * positive_candidate(h_pre)


@keras.saving.register_keras_serializable(package="keras_seq")
class MinLSTM(KernelRNN):
    """The minimal LSTM layer (`MinLSTMCell` over time): trains as a parallel scan.

    In training (``training=True``) the whole sequence is one linear scan over
    time (`MinLSTMCell.parallel`); at inference, and in streaming and export,
    the cell runs step by step. On JAX's CPU the step loop also trains (XLA
    fuses it, measured faster); the scan is a loop of one multiply-add per step
    on a CPU and a log-depth parallel scan on a GPU (chosen when traced:
    docs/contract.md, "Which form runs where"). Masks, ``initial_state``,
    ``go_backwards``, ``return_state``, ``stateful``,
    `keras.layers.Bidirectional` and mixed precision work as for `GRU`.

    Args:
        units: int, width of h.
        **kwargs: `keras_seq.layers.RNN`'s ``return_sequences``,
            ``return_state``, ``go_backwards``, ``stateful`` and ``unroll``;
            the cell's ``kernel_initializer``, ``bias_initializer``,
            ``*_regularizer``, ``*_constraint`` and ``seed``: `MinLSTMCell`.

    Call arguments: ``inputs (B, T, in)``, ``mask (B, T)``, ``training``,
    ``initial_state`` ``[h]``.

    Examples:
        >>> import numpy as np
        >>> from keras_seq.layers import MinLSTM
        >>> MinLSTM(8)(np.zeros((2, 5, 3), "float32")).shape
        TensorShape([2, 8])

    References:
        Feng et al., "Were RNNs All We Needed?", 2024.
    """

    cell_class = MinLSTMCell
