"""Gated recurrent unit (Cho et al., 2014), weight-compatible with `keras.layers.GRU`."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq._validation import check_bool
from keras_seq.layers.recurrent import backend
from keras_seq.layers.recurrent.gated_cell import (
    GatedCell,
    GatedRNN,
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
from keras_seq.layers.recurrent.operator_forms import GRUForm
from keras_seq.layers.recurrent.rnn import LoopHints


@keras.saving.register_keras_serializable(package="keras_seq")
class GRUCell(GatedCell):
    """One step of a gated recurrent unit.

    ```
    z   = σ(W_z x + U_z h_{t-1} + b_z)
    r   = σ(W_r x + U_r h_{t-1} + b_r)
    ĥ   = tanh(W_h x + r ⊙ (U_h h_{t-1}) + b_h)     reset_after=True (default)
    ĥ   = tanh(W_h x + U_h (r ⊙ h_{t-1}) + b_h)     reset_after=False
    h_t = z ⊙ h_{t-1} + (1 − z) ⊙ ĥ
    ```

    With `reset_after=True` the bias is `(2, 3u)`: row 0 is added to `W x`,
    row 1 to `U h` (so b_h of row 1 sits inside the reset product), exactly as
    `keras.layers.GRUCell`. Weights (`kernel (in, 3u)`, `recurrent_kernel
    (u, 3u)`, `bias`) are identical to Keras', gate order z, r, h, so they
    copy both ways.

    Args:
        units: int, size of h.
        reset_after: bool, default True: apply the reset gate after the
            recurrent matmul (the cuDNN convention).
        **kwargs: `activation`, `recurrent_activation`, `use_bias`,
            `kernel_initializer`, `recurrent_initializer`, `bias_initializer`,
            `*_regularizer`, `*_constraint`, `dropout`, `recurrent_dropout`,
            `seed`: as in `keras.layers.GRUCell`; `zoneout` (of h): as in
            `PeepholeLSTMCell`.

    Examples:
        >>> import numpy as np, keras
        >>> from keras_seq.layers import GRUCell
        >>> rnn = keras.layers.RNN(GRUCell(4))
        >>> rnn(np.zeros((2, 5, 3), "float32")).shape
        TensorShape([2, 4])

    References:
        Cho et al., "Learning Phrase Representations using RNN Encoder-Decoder
        for Statistical Machine Translation", EMNLP 2014.
    """

    def __init__(self, units: int, reset_after: bool = True, **kwargs):
        super().__init__(units, **kwargs)
        self.reset_after = check_bool(type(self).__name__, "reset_after", reset_after)
        self.state_size = self.units

    def build(self, input_shape):
        input_dim = self.check_input_shape(input_shape)
        self.add_kernels(input_dim, gates=3)
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                shape=(2, 3 * self.units) if self.reset_after else (3 * self.units,),
                name="bias",
                initializer=self.bias_initializer,
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
            )
        self.built = True

    loop_hints = LoopHints(pointwise_projection=True, output_is_first_state=True)

    def project(self, sequence):
        """``W x`` plus the input bias (row 0 with ``reset_after``): the
        biases outside the reset product."""
        if not self.use_bias:
            return backend.project(sequence, self.kernel)
        bias = self.bias[0] if self.reset_after else self.bias
        return backend.project(sequence, self.kernel, bias)

    def step(self, inputs, states, training=False):
        h_tm1 = states[0]
        u = self.units
        h_in = h_tm1
        if training and self.recurrent_dropout > 0.0:
            h_in = h_tm1 * self.get_recurrent_dropout_mask(h_tm1)
        x_zr, x_h = backend.split(inputs, [2 * u, u])
        U = self.recurrent_kernel
        if self.reset_after:
            # One (u, 3u) matmul with the recurrent bias; r multiplies U_h h + b_h.
            b = self.bias[1] if self.use_bias else None
            uh_zr, uh_h = backend.split(backend.recurrent_matmul(h_in, U, b), [2 * u, u])
        else:
            uh_zr = backend.recurrent_matmul(h_in, U[:, : 2 * u], None)
        # z and r side by side: one activation for both gates.
        z, r = backend.split(self.recurrent_activation(x_zr + uh_zr), 2)
        if self.reset_after:
            h_tilde = self.activation(x_h + r * uh_h)
        else:
            h_tilde = self.activation(x_h + backend.recurrent_matmul(r * h_in, U[:, 2 * u :], None))
        h = h_tilde + z * (h_tm1 - h_tilde)  # = z ⊙ h_{t-1} + (1 − z) ⊙ ĥ, one op less
        return h, [h]

    def manual_gradient(self):
        """`step` and its derivative for TensorFlow's training loop (`GRUGradient`)."""
        return GRUGradient(self)

    def operator_form(self):
        """Keras' GRU: one ONNX ``GRU`` node in the exports."""
        return GRUForm(self.kernel, self.recurrent_kernel, self.bias, self.reset_after,
                       activation=self.activation,
                       recurrent_activation=self.recurrent_activation)

    def get_config(self):
        return {**super().get_config(), "reset_after": self.reset_after}


class GRUGradient(ManualGradient):
    """`GRUCell.step` and its derivative (`ManualGradient`), ``reset_after=True``
    only (``reset_after=False`` trains with autodiff). Saved per step: [z, r],
    h̃, U_h h + b_h."""

    @property
    def saved_widths(self):
        u = self.cell.units
        return [2 * u, u, u]

    def supported(self):
        return self.cell.reset_after and self.cell.standard_activations()

    def project(self, xs):
        """``W x`` with the input bias and the recurrent biases of z and r
        (plain sums); only the recurrent b_h stays inside r ⊙ (...)."""
        cell = self.cell
        if not cell.use_bias:
            return backend.project(xs, self.read(cell.kernel))
        bias = self.read(cell.bias)
        u = cell.units
        extra = ops.concatenate([bias[1, : 2 * u], ops.zeros((u,), bias.dtype)], 0)
        return backend.project(xs, self.read(cell.kernel), bias[0] + extra)

    def weights(self):
        cell = self.cell
        U = self.read(cell.recurrent_kernel)
        return [U, self.read(cell.bias)[1, 2 * cell.units :]] if cell.use_bias else [U]

    def forward(self, xw_t, r_t, states, params):
        h_prev = states[0]
        u = self.cell.units
        x_zr, x_h = backend.split(xw_t, [2 * u, u])
        r_zr, r_h = backend.split(r_t, [2 * u, u])
        if params:
            r_h = r_h + params[0]
        zr = fast_sigmoid(x_zr + r_zr)
        z, r = backend.split(zr, 2)
        h_tilde = fast_tanh(x_h + r * r_h)
        return [h_tilde + z * (h_prev - h_tilde)], [zr, h_tilde, r_h]

    def backward(self, saved, states_prev, states, d_states, params):
        zr, h_tilde, r_h = saved
        d_h = d_states[0]
        z, r = backend.split(zr, 2)
        d_h_z = d_h * z
        d_a = tanh_grad(h_tilde, d_h - d_h_z)  # ∂h/∂h̃ = 1 − z
        d_zr = sigmoid_grad(zr, ops.concatenate([d_h * (states_prev[0] - h_tilde), d_a * r_h], -1))
        d_r_h = d_a * r
        d_xw = ops.concatenate([d_zr, d_a], axis=-1)
        d_r = ops.concatenate([d_zr, d_r_h], axis=-1)
        return d_xw, d_r, [d_h_z], [d_r_h] if params else []


@keras.saving.register_keras_serializable(package="keras_seq")
class GRU(GatedRNN):
    """GRU layer; same weights and results as `keras.layers.GRU`.

    Runs `GRUCell` over time (see its equations) with the input projection of
    all steps hoisted into one matmul before the loop.

    `units`, `reset_after`, `activation`, `recurrent_activation`, `use_bias`,
    `*_initializer`, `*_regularizer`, `*_constraint`, `dropout`,
    `recurrent_dropout`, `seed` and `zoneout` are as in `GRUCell`;
    `activity_regularizer`, `return_sequences`, `return_state`,
    `go_backwards`, `stateful` and `unroll` as in `PeepholeLSTM`.

    Call arguments: `inputs (B, T, in)`, `mask (B, T)`, `training`,
    `initial_state` `h` (or `[h]`). With `return_state=True` it returns
    `[output, h]`.

    Examples:
        >>> import numpy as np
        >>> from keras_seq.layers import GRU
        >>> layer = GRU(8, return_sequences=True, return_state=True)
        >>> sequence, h = layer(np.zeros((2, 5, 3), "float32"))
        >>> sequence.shape, h.shape
        (TensorShape([2, 5, 8]), TensorShape([2, 8]))

    References:
        Cho et al., "Learning Phrase Representations using RNN Encoder-Decoder
        for Statistical Machine Translation", EMNLP 2014.
    """

    cell_class = GRUCell

    def __init__(
        self,
        units: int,
        activation="tanh",
        recurrent_activation="sigmoid",
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        dropout: float = 0.0,
        recurrent_dropout: float = 0.0,
        seed: int | None = None,
        zoneout=0.0,
        return_sequences: bool = False,
        return_state: bool = False,
        go_backwards: bool = False,
        stateful: bool = False,
        unroll: bool = False,
        reset_after: bool = True,
        **kwargs,
    ):
        validate_recurrent_args(
            type(self).__name__, units, activation, recurrent_activation, dropout,
            recurrent_dropout, zoneout=zoneout, use_bias=use_bias, reset_after=reset_after,
        )
        super().__init__(
            units, reset_after=reset_after, activation=activation,
            recurrent_activation=recurrent_activation, use_bias=use_bias,
            kernel_initializer=kernel_initializer, recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer, bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint, bias_constraint=bias_constraint,
            dropout=dropout, recurrent_dropout=recurrent_dropout, seed=seed, zoneout=zoneout,
            return_sequences=return_sequences, return_state=return_state,
            go_backwards=go_backwards, stateful=stateful, unroll=unroll, **kwargs,
        )


GRU.reset_after = delegate_to_cell("reset_after")
