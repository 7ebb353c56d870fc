"""minGRU (Feng et al. 2024): a GRU whose gates read the input only, so it trains as a scan."""

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
class MinGRUCell(KernelCell):
    """One step of the minimal GRU.

    ```
    z   = σ(W_z x + b_z)
    h̃   = g(W_h x + b_h)          g(v) = v + 0.5 (v ≥ 0), σ(v) (v < 0)
    h_t = (1 − z) ⊙ h_{t-1} + z ⊙ h̃
    ```

    Neither gate reads h_{t-1}: the update is linear in the state, h_t =
    a_t ⊙ h_{t-1} + b_t with a_t = 1 − z, b_t = z ⊙ h̃. It is a linear cell
    (`keras_seq.layers.RecurrentCell`): it defines ``coefficients``, and the
    base class derives from them ``step`` (inference,
    `keras_seq.export.streaming_model`, the TFLite and ONNX exports) and the
    parallel form, one scan over time (what `RNN` trains with). Both compute
    the same numbers (to float round-off). Weights: ``kernel (in, 2u)``, columns z then h̃, and ``bias
    (2u,)``. State ``[h]``, starting at zero.

    Args:
        units: int, width of h.
        **kwargs: ``kernel_initializer``, ``bias_initializer``, ``*_regularizer``,
            ``*_constraint`` and ``seed``, as in `KernelCell`.

    Examples:
        >>> import numpy as np
        >>> from keras_seq.layers import MinGRUCell, RNN
        >>> RNN(MinGRUCell(4))(np.ones((2, 5, 3), "float32")).shape
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
        self.kernel = self.add_kernel("kernel", (features, 2 * self.units))
        self.bias = self.add_bias("bias", (2 * self.units,))
        self.built = True

    def project(self, sequence):
        """``x W + b``: the pre-activations of z and h̃ for every step."""
        return backend.project(sequence, self.kernel, self.bias)

    def coefficients(self, projected):
        """``(a, b)`` of h_t = a ⊙ h_{t-1} + b from the projected input."""
        z_pre, h_pre = backend.split(projected, 2)
        # 1 − σ(v) as σ(−v): no cancellation when z is close to 1.
        return ops.sigmoid(negated(z_pre)), ops.sigmoid(z_pre) * positive_candidate(h_pre)


@keras.saving.register_keras_serializable(package="keras_seq")
class MinGRU(KernelRNN):
    """The minimal GRU layer (`MinGRUCell` over time): trains as a parallel scan.

    In training (``training=True``, as in ``fit``) the whole sequence is one
    linear scan over time (`MinGRUCell.parallel`); at inference, and in
    streaming and export, the cell runs step by step. On JAX's CPU the step
    loop also trains (XLA fuses it, measured faster); the scan is a loop of one
    multiply-add per step on a CPU and a log-depth parallel scan on a GPU
    (chosen when traced: docs/contract.md, "Which form runs where"). Masks (a
    masked step carries h and repeats the last output), ``initial_state``,
    ``go_backwards``, ``return_state``, ``stateful``,
    `keras.layers.Bidirectional` and mixed precision work as for `GRU`.

    Args:
        units: int, width of h.
        **kwargs: `keras_seq.layers.RNN`'s ``return_sequences``,
            ``return_state``, ``go_backwards``, ``stateful`` and ``unroll``;
            the cell's ``kernel_initializer``, ``bias_initializer``,
            ``*_regularizer``, ``*_constraint`` and ``seed``: `MinGRUCell`.

    Call arguments: ``inputs (B, T, in)``, ``mask (B, T)``, ``training``,
    ``initial_state`` ``[h]``.

    Examples:
        >>> import numpy as np
        >>> from keras_seq.layers import MinGRU
        >>> sequence, h = MinGRU(8, return_sequences=True, return_state=True)(
        ...     np.zeros((2, 5, 3), "float32"))
        >>> sequence.shape, h.shape
        (TensorShape([2, 5, 8]), TensorShape([2, 8]))

    References:
        Feng et al., "Were RNNs All We Needed?", 2024.
    """

    cell_class = MinGRUCell
