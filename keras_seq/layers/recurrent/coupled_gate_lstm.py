"""Coupled input-forget gate LSTM (CIFG; Greff et al., 2017)."""

from __future__ import annotations

import keras

from keras_seq._validation import check_bool
from keras_seq.layers.recurrent import backend
from keras_seq.layers.recurrent.gated_cell import (
    GatedRNN,
    LSTMCellBase,
    delegate_to_cell,
    validate_recurrent_args,
)
from keras_seq.layers.recurrent.rnn import LoopHints


@keras.saving.register_keras_serializable(package="keras_seq")
class CoupledGateLSTMCell(LSTMCellBase):
    """One step of an LSTM whose input gate is tied to the forget gate (i = 1 − f).

    ```
    f   = σ(W_f x + U_f h_{t-1} [+ p_f ⊙ c_{t-1}] + b_f)
    c_t = f ⊙ c_{t-1} + (1 − f) ⊙ tanh(W_c x + U_c h_{t-1} + b_c)
    o   = σ(W_o x + U_o h_{t-1} [+ p_o ⊙ c_t] + b_o)
    h_t = o ⊙ tanh(c_t)
    ```

    The bracketed peephole terms are present when `use_peepholes=True`.
    Weights, in `get_weights()` order: `kernel (in, 3u)`,
    `recurrent_kernel (u, 3u)`, `bias (3u,)`, then `forget_peephole (u,)`,
    `output_peephole (u,)` when `use_peepholes`; gates are ordered f, c, o.
    Three gates instead of four: 3(mn + n² + n) parameters (+2n).

    Args:
        units: int, size of h and c.
        use_peepholes: bool, default False: add the peephole terms.
        **kwargs: `activation`, `recurrent_activation`, `use_bias`,
            `*_initializer`, `unit_forget_bias`, `*_regularizer`,
            `*_constraint`, `dropout`, `recurrent_dropout`, `seed`, `zoneout`:
            as in `PeepholeLSTMCell`.

    Examples:
        >>> import numpy as np, keras
        >>> from keras_seq.layers import CoupledGateLSTMCell
        >>> rnn = keras.layers.RNN(CoupledGateLSTMCell(4, use_peepholes=True))
        >>> rnn(np.zeros((2, 5, 3), "float32")).shape
        TensorShape([2, 4])

    References:
        Greff, Srivastava, Koutník, Steunebrink & Schmidhuber, "LSTM: A Search
        Space Odyssey", IEEE TNNLS 2017 (variant CIFG).
    """

    def __init__(self, units: int, use_peepholes: bool = False, **kwargs):
        super().__init__(units, **kwargs)
        self.use_peepholes = check_bool(type(self).__name__, "use_peepholes", use_peepholes)

    def build(self, input_shape):
        input_dim = self.check_input_shape(input_shape)
        self.add_kernels(input_dim, gates=3)
        self.add_bias(gates=3, forget_gate=0)
        if self.use_peepholes:
            self.forget_peephole = self.add_peephole("forget_peephole")
            self.output_peephole = self.add_peephole("output_peephole")
        self.built = True

    loop_hints = LoopHints(
        pointwise_projection=True,
        output_is_first_state=True,
        manual_gradient="keras_seq.layers.recurrent.gradients_tensorflow.CoupledGateLSTMGradient",
    )

    def project(self, sequence):
        return backend.project(sequence, self.kernel)  # W x; the step adds b with U h

    def step(self, inputs, states, training=False):
        h_tm1, c_tm1 = states
        h_in = h_tm1
        if training and self.recurrent_dropout > 0.0:
            h_in = h_tm1 * self.get_recurrent_dropout_mask(h_tm1)
        z = inputs + backend.recurrent_matmul(h_in, self.recurrent_kernel, self.bias)
        z_f, z_c, z_o = backend.split(z, 3)
        if self.use_peepholes:
            z_f = z_f + self.forget_peephole * c_tm1
        f = self.recurrent_activation(z_f)
        c_tilde = self.activation(z_c)
        # = f ⊙ c_{t-1} + (1 − f) ⊙ c̃ with one op less (and no constant to broadcast).
        c = c_tilde + f * (c_tm1 - c_tilde)
        if self.use_peepholes:
            z_o = z_o + self.output_peephole * c
        o = self.recurrent_activation(z_o)
        h = o * self.activation(c)
        return h, [h, c]

    def get_config(self):
        return {**super().get_config(), "use_peepholes": self.use_peepholes}


@keras.saving.register_keras_serializable(package="keras_seq")
class CoupledGateLSTM(GatedRNN):
    """CIFG LSTM layer: three gates, the input gate is 1 − forget gate.

    Runs `CoupledGateLSTMCell` over time (see its equations) with the input
    projection of all steps hoisted into one matmul before the loop.

    `units`, `use_peepholes`, `activation`, `recurrent_activation`,
    `use_bias`, `*_initializer`, `unit_forget_bias`, `*_regularizer`,
    `*_constraint`, `dropout`, `recurrent_dropout`, `seed` and `zoneout` are
    as in `CoupledGateLSTMCell`; `activity_regularizer`, `return_sequences`,
    `return_state`, `go_backwards`, `stateful` and `unroll` as in
    `PeepholeLSTM`.

    Call arguments: `inputs (B, T, in)`, `mask (B, T)`, `training`,
    `initial_state` `[h, c]`.

    Examples:
        >>> import numpy as np
        >>> from keras_seq.layers import CoupledGateLSTM
        >>> layer = CoupledGateLSTM(8, return_state=True)
        >>> output, h, c = layer(np.zeros((2, 5, 3), "float32"))
        >>> output.shape, c.shape
        (TensorShape([2, 8]), TensorShape([2, 8]))

    References:
        Greff et al., "LSTM: A Search Space Odyssey", IEEE TNNLS 2017.
    """

    cell_class = CoupledGateLSTMCell

    def __init__(
        self,
        units: int,
        activation="tanh",
        recurrent_activation="sigmoid",
        use_bias: bool = True,
        use_peepholes: bool = False,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        peephole_initializer="glorot_uniform",
        unit_forget_bias: bool = True,
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        peephole_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        peephole_constraint=None,
        dropout: float = 0.0,
        recurrent_dropout: float = 0.0,
        seed: int | None = None,
        zoneout=0.0,
        return_sequences: bool = False,
        return_state: bool = False,
        go_backwards: bool = False,
        stateful: bool = False,
        unroll: bool = False,
        **kwargs,
    ):
        validate_recurrent_args(
            type(self).__name__, units, activation, recurrent_activation, dropout,
            recurrent_dropout, zoneout=zoneout, use_bias=use_bias, use_peepholes=use_peepholes,
            unit_forget_bias=unit_forget_bias,
        )
        super().__init__(
            units, use_peepholes=use_peepholes, activation=activation,
            recurrent_activation=recurrent_activation, use_bias=use_bias,
            kernel_initializer=kernel_initializer, recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer, peephole_initializer=peephole_initializer,
            unit_forget_bias=unit_forget_bias, kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer, bias_regularizer=bias_regularizer,
            peephole_regularizer=peephole_regularizer, activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint, recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint, peephole_constraint=peephole_constraint,
            dropout=dropout, recurrent_dropout=recurrent_dropout, seed=seed, zoneout=zoneout,
            return_sequences=return_sequences, return_state=return_state,
            go_backwards=go_backwards, stateful=stateful, unroll=unroll, **kwargs,
        )


for _name in ("use_peepholes", "unit_forget_bias", "peephole_initializer",
              "peephole_regularizer", "peephole_constraint"):
    setattr(CoupledGateLSTM, _name, delegate_to_cell(_name))
del _name
