"""Coupled input-forget gate LSTM (CIFG; Greff et al., 2017)."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq._validation import check_bool
from keras_seq.layers.recurrent import backend
from keras_seq.layers.recurrent.gated_cell import (
    GatedRNN,
    LSTMCellBase,
    delegate_to_cell,
    validate_recurrent_args,
)
from keras_seq.layers.recurrent.manual_gradient import (
    ManualGradient,
    fast_sigmoid,
    fast_tanh,
    sigmoid_grad,
    tanh_grad,
)
from keras_seq.layers.recurrent.operator_forms import LSTMForm
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

    loop_hints = LoopHints(pointwise_projection=True, output_is_first_state=True)

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

    def manual_gradient(self):
        """`step` and its derivative for TensorFlow's training loop (`CoupledGateLSTMGradient`)."""
        return CoupledGateLSTMGradient(self)

    def operator_form(self):
        """The LSTM with a coupled input-forget gate: one ONNX ``LSTM`` node
        (``input_forget=1``) or TFLite's fused LSTM (CIFG) in the exports."""
        peepholes = (self.forget_peephole, self.output_peephole) if self.use_peepholes else (
            None, None)
        return LSTMForm(self.kernel, self.recurrent_kernel, self.bias, None, *peepholes,
                        coupled_input_forget=True, activation=self.activation,
                        recurrent_activation=self.recurrent_activation)

    def get_config(self):
        return {**super().get_config(), "use_peepholes": self.use_peepholes}


class CoupledGateLSTMGradient(ManualGradient):
    """`CoupledGateLSTMCell.step` and its derivative (`ManualGradient`), with
    and without peepholes. Saved per step: f, g = tanh(z_c), o."""

    d_r_is_d_xw = True

    @property
    def saved_widths(self):
        return [self.cell.units] * 3

    def supported(self):
        return self.cell.standard_activations()

    def project(self, xs):
        cell = self.cell
        bias = self.read(cell.bias) if cell.use_bias else None
        return backend.project(xs, self.read(cell.kernel), bias)

    def weights(self):
        cell = self.cell
        peepholes = (cell.forget_peephole, cell.output_peephole) if cell.use_peepholes else ()
        return [self.read(w) for w in (cell.recurrent_kernel, *peepholes)]

    def forward(self, xw_t, r_t, states, params):
        c_prev = states[1]
        z_f, z_c, z_o = backend.split(xw_t + r_t, 3)
        if params:
            z_f = z_f + params[0] * c_prev
        f = fast_sigmoid(z_f)
        g = fast_tanh(z_c)
        c = g + f * (c_prev - g)
        if params:
            z_o = z_o + params[1] * c
        o = fast_sigmoid(z_o)
        return [o * fast_tanh(c), c], [f, g, o]

    def backward(self, saved, states_prev, states, d_states, params):
        f, g, o = saved
        c_prev = states_prev[1]
        tanh_c = fast_tanh(states[1])  # cheaper to recompute than to store and read back
        d_h, d_c = d_states
        d_zo = sigmoid_grad(o, d_h * tanh_c)
        d_c = d_c + tanh_grad(tanh_c, d_h * o)
        if params:
            d_c = d_c + d_zo * params[1]  # o sees c through p_o
        d_zf = sigmoid_grad(f, d_c * (c_prev - g))
        d_c_f = d_c * f
        d_zc = tanh_grad(g, d_c - d_c_f)  # ∂c/∂g = 1 − f
        d_z = ops.concatenate([d_zf, d_zc, d_zo], axis=-1)
        if not params:
            return d_z, d_z, [None, d_c_f], []
        d_c_prev = d_c_f + d_zf * params[0]
        return d_z, d_z, [None, d_c_prev], [d_zf * c_prev, d_zo * states[1]]


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
