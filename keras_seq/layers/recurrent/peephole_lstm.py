"""LSTM with peephole connections (Gers & Schmidhuber, 2000)."""

from __future__ import annotations

import keras
from keras import ops

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
class PeepholeLSTMCell(LSTMCellBase):
    """One step of an LSTM whose gates also look at the cell state.

    ```
    i   = σ(W_i x + U_i h_{t-1} + p_i ⊙ c_{t-1} + b_i)
    f   = σ(W_f x + U_f h_{t-1} + p_f ⊙ c_{t-1} + b_f)
    c_t = f ⊙ c_{t-1} + i ⊙ tanh(W_c x + U_c h_{t-1} + b_c)
    o   = σ(W_o x + U_o h_{t-1} + p_o ⊙ c_t + b_o)
    h_t = o ⊙ tanh(c_t)
    ```

    σ is `recurrent_activation` and tanh is `activation`. Weights, in
    `get_weights()` order: `kernel (in, 4u)`, `recurrent_kernel (u, 4u)`,
    `bias (4u,)`, `input_peephole (u,)`, `forget_peephole (u,)`,
    `output_peephole (u,)`; gates are ordered i, f, c, o as in
    `keras.layers.LSTM`, so with zero peepholes this is exactly `LSTMCell`.

    Args:
        units: int, size of h and c.
        unit_forget_bias: bool, default True: forget-gate bias starts at 1.
        peephole_initializer: initializer of the peepholes, default "glorot_uniform".
        peephole_regularizer: optional regularizer of the peepholes.
        peephole_constraint: optional constraint of the peepholes.
        **kwargs: the keyword arguments below, and `keras.layers.Layer`'s.

    Keyword Args:
        activation: activation of the candidate and of the output, default "tanh".
        recurrent_activation: gate activation, default "sigmoid".
        use_bias: bool, default True.
        *_initializer: `kernel_initializer`, `recurrent_initializer`,
            `bias_initializer` (defaults "glorot_uniform", "orthogonal", "zeros").
        *_regularizer: optional `kernel_`, `recurrent_`, `bias_regularizer`.
        *_constraint: optional `kernel_`, `recurrent_`, `bias_constraint`.
        dropout: float in [0, 1), input dropout (one mask per sequence).
        recurrent_dropout: float in [0, 1), dropout on h_{t-1} before U.
        seed: int, seed of the dropout and zoneout masks.
        zoneout: float in [0, 1), or one per state `(z_h, z_c)`: zoneout
            (Krueger et al. 2017). In training each unit of each state keeps
            its previous value with probability z (fresh masks at every step
            of every call); at inference the state is z·previous + (1 − z)·new.
            The output at a step is the new h. Training with zoneout runs the
            autodiff loop, not the hand-written gradient.

    Examples:
        >>> import numpy as np, keras
        >>> from keras_seq.layers import PeepholeLSTMCell
        >>> rnn = keras.layers.RNN(PeepholeLSTMCell(4))
        >>> rnn(np.zeros((2, 5, 3), "float32")).shape
        TensorShape([2, 4])

    References:
        Gers & Schmidhuber, "Recurrent nets that time and count", IJCNN 2000.
        Gers, Schraudolph & Schmidhuber, "Learning precise timing with LSTM
        recurrent networks", JMLR 2002.
    """

    def build(self, input_shape):
        input_dim = self.check_input_shape(input_shape)
        self.add_kernels(input_dim, gates=4)
        self.add_bias(gates=4, forget_gate=1)
        self.input_peephole = self.add_peephole("input_peephole")
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
        # All four gates' recurrent terms in one (u, 4u) matmul.
        z = inputs + backend.recurrent_matmul(h_in, self.recurrent_kernel, self.bias)
        z_i, z_f, z_c, z_o = backend.split(z, 4)
        i = self.recurrent_activation(z_i + self.input_peephole * c_tm1)
        f = self.recurrent_activation(z_f + self.forget_peephole * c_tm1)
        c = f * c_tm1 + i * self.activation(z_c)
        o = self.recurrent_activation(z_o + self.output_peephole * c)
        h = o * self.activation(c)
        return h, [h, c]

    def manual_gradient(self):
        """`step` and its derivative for TensorFlow's training loop (`PeepholeLSTMGradient`)."""
        return PeepholeLSTMGradient(self)

    def operator_form(self):
        """Keras' LSTM with peepholes: one ONNX ``LSTM`` node (input ``P``) or
        TFLite's fused LSTM in the exports."""
        return LSTMForm(self.kernel, self.recurrent_kernel, self.bias, self.input_peephole,
                        self.forget_peephole, self.output_peephole,
                        activation=self.activation,
                        recurrent_activation=self.recurrent_activation)


class PeepholeLSTMGradient(ManualGradient):
    """`PeepholeLSTMCell.step` and its derivative (`ManualGradient`). Saved
    per step: i, f, g = tanh(z_c), o (tanh(c) is recomputed)."""

    d_r_is_d_xw = True

    @property
    def saved_widths(self):
        return [self.cell.units] * 4

    def supported(self):
        return self.cell.standard_activations()

    def project(self, xs):
        cell = self.cell
        bias = self.read(cell.bias) if cell.use_bias else None
        return backend.project(xs, self.read(cell.kernel), bias)

    def weights(self):
        cell = self.cell
        return [self.read(w) for w in (cell.recurrent_kernel, cell.input_peephole,
                                       cell.forget_peephole, cell.output_peephole)]

    def forward(self, xw_t, r_t, states, params):
        c_prev = states[1]
        p_i, p_f, p_o = params
        z_i, z_f, z_c, z_o = backend.split(xw_t + r_t, 4)
        i = fast_sigmoid(z_i + p_i * c_prev)
        f = fast_sigmoid(z_f + p_f * c_prev)
        g = fast_tanh(z_c)
        c = f * c_prev + i * g
        o = fast_sigmoid(z_o + p_o * c)
        return [o * fast_tanh(c), c], [i, f, g, o]

    def backward(self, saved, states_prev, states, d_states, params):
        i, f, g, o = saved
        c_prev, c = states_prev[1], states[1]
        tanh_c = fast_tanh(c)  # cheaper to recompute than to store and read back
        d_h, d_c = d_states
        p_i, p_f, p_o = params
        d_zo = sigmoid_grad(o, d_h * tanh_c)
        d_c = d_c + tanh_grad(tanh_c, d_h * o) + d_zo * p_o  # o sees c through p_o
        d_zi = sigmoid_grad(i, d_c * g)
        d_zf = sigmoid_grad(f, d_c * c_prev)
        d_zc = tanh_grad(g, d_c * i)
        d_z = ops.concatenate([d_zi, d_zf, d_zc, d_zo], axis=-1)
        d_c_prev = d_c * f + d_zi * p_i + d_zf * p_f
        return d_z, d_z, [None, d_c_prev], [d_zi * c_prev, d_zf * c_prev, d_zo * c]


@keras.saving.register_keras_serializable(package="keras_seq")
class PeepholeLSTM(GatedRNN):
    """LSTM layer with peephole connections; a drop-in for `keras.layers.LSTM`.

    Runs `PeepholeLSTMCell` over time (see its equations). The input
    projection of all steps is one matmul before the time loop; the loop does
    only the recurrent part.

    `units`, `activation`, `recurrent_activation`, `use_bias`, `*_initializer`,
    `unit_forget_bias`, `*_regularizer`, `*_constraint`, `dropout`,
    `recurrent_dropout` and `seed` are as in `PeepholeLSTMCell`.

    Args:
        activity_regularizer: optional regularizer of the output.
        return_sequences: bool, return the output of every step (B, T, u)
            instead of the last one (B, u).
        return_state: bool, also return the final states: `[output, h, c]`.
        go_backwards: bool, process the sequence in reverse (outputs come in
            processing order, as in Keras).
        stateful: bool, carry the final states of a batch into the next one
            (needs a fixed batch size).
        unroll: bool, unroll the loop (needs a static length).

    Call arguments: `inputs (B, T, in)`, `mask (B, T)` bool (True = keep),
    `training`, `initial_state` `[h, c]`.

    Examples:
        >>> import numpy as np
        >>> from keras_seq.layers import PeepholeLSTM
        >>> layer = PeepholeLSTM(8, return_sequences=True)
        >>> layer(np.zeros((2, 5, 3), "float32")).shape
        TensorShape([2, 5, 8])

    References:
        Gers & Schmidhuber, "Recurrent nets that time and count", IJCNN 2000.
    """

    cell_class = PeepholeLSTMCell

    def __init__(
        self,
        units: int,
        activation="tanh",
        recurrent_activation="sigmoid",
        use_bias: bool = True,
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
            recurrent_dropout, zoneout=zoneout, use_bias=use_bias, unit_forget_bias=unit_forget_bias,
        )
        super().__init__(
            units, activation=activation, recurrent_activation=recurrent_activation,
            use_bias=use_bias, kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer, bias_initializer=bias_initializer,
            peephole_initializer=peephole_initializer, unit_forget_bias=unit_forget_bias,
            kernel_regularizer=kernel_regularizer, recurrent_regularizer=recurrent_regularizer,
            bias_regularizer=bias_regularizer, peephole_regularizer=peephole_regularizer,
            activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint, bias_constraint=bias_constraint,
            peephole_constraint=peephole_constraint, dropout=dropout,
            recurrent_dropout=recurrent_dropout, seed=seed, zoneout=zoneout,
            return_sequences=return_sequences, return_state=return_state,
            go_backwards=go_backwards, stateful=stateful, unroll=unroll, **kwargs,
        )


for _name in ("unit_forget_bias", "peephole_initializer", "peephole_regularizer",
              "peephole_constraint"):
    setattr(PeepholeLSTM, _name, delegate_to_cell(_name))
del _name
