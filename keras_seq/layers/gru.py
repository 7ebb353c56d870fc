"""Gated recurrent unit (Cho et al., 2014), weight-compatible with `keras.layers.GRU`."""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from keras_seq._validation import check_bool
from keras_seq.layers._bptt import fast_sigmoid, fast_tanh, sigmoid_grad, tanh_grad
from keras_seq.layers._recurrent_base import (
    RecurrentCell,
    validate_recurrent_args,
)
from keras_seq.layers._recurrent_driver import project, recurrent_matmul, split
from keras_seq.layers._recurrent_layer import RecurrentLayer, delegate_to_cell


@keras.saving.register_keras_serializable(package="keras_seq")
class GRUCell(RecurrentCell):
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

    def project_inputs(self, x, bias=True):
        kernel = self.read_weight(self.kernel)
        if not self.use_bias:
            return project(x, kernel)
        if not self.reset_after:
            # The step adds b_zr and b_h after its two matmuls (`recurrent_matmul`).
            return project(x, kernel, self.read_weight(self.bias) if bias else None)
        bias = self.read_weight(self.bias)
        # The recurrent biases of z and r are plain sums too, so they join the
        # input bias here; only b_h (recurrent) must stay inside r ⊙ (...).
        u = self.units
        zeros = ops.zeros((u,), dtype=bias.dtype)
        return project(x, kernel, bias[0] + ops.concatenate([bias[1, : 2 * u], zeros]))

    def recurrent_weights(self, batch_size=None, bptt=False):
        U = self.read_weight(self.recurrent_kernel)
        u = self.units
        if bptt:  # reset_after only: [U, recurrent b_h], or [U] without a bias
            return [U, self.read_weight(self.bias[1, 2 * u :])] if self.use_bias else [U]
        if self.use_bias:
            bias = self.read_weight(self.bias)
        else:
            bias = ops.zeros((2, 3 * u) if self.reset_after else (3 * u,), self.compute_dtype)
        if not self.reset_after:
            # Sliced once here, not at every step: U_zr acts on h, U_h on r ⊙ h.
            return [U[:, : 2 * u], U[:, 2 * u :], bias[: 2 * u], bias[2 * u :]]
        # b_h only: the recurrent biases of z and r are in the input projection.
        return [U, ops.concatenate([ops.zeros((2 * u,), dtype=bias.dtype), bias[1, 2 * u :]])]

    # Hand-written gradient for training, reset_after=True only (the
    # bptt_* hooks of RecurrentCell); reset_after=False trains with autodiff.
    bptt_d_r_is_d_xw = False

    @property
    def bptt_saved_widths(self):
        return [2 * self.units, self.units, self.units]  # [z, r], h̃, U_h h + b_h

    def bptt_supported(self):
        return self.reset_after and self.standard_activations()

    def bptt_forward(self, xw_t, r_t, states, params):
        h_prev = states[0]
        u = self.units
        x_zr, x_h = tf.split(xw_t, [2 * u, u], axis=-1)
        r_zr, r_h = tf.split(r_t, [2 * u, u], axis=-1)
        if params:
            r_h = r_h + params[0]
        zr = fast_sigmoid(x_zr + r_zr)
        z, r = tf.split(zr, 2, axis=-1)
        h_tilde = fast_tanh(x_h + r * r_h)
        return [h_tilde + z * (h_prev - h_tilde)], [zr, h_tilde, r_h]

    def bptt_backward(self, saved, states_prev, states, d_states, params):
        zr, h_tilde, r_h = saved
        d_h = d_states[0]
        z, r = tf.split(zr, 2, axis=-1)
        d_h_z = d_h * z
        d_a = tanh_grad(h_tilde, d_h - d_h_z)  # ∂h/∂h̃ = 1 − z
        d_zr = sigmoid_grad(zr, tf.concat([d_h * (states_prev[0] - h_tilde), d_a * r_h], -1))
        d_r_h = d_a * r
        d_xw = tf.concat([d_zr, d_a], axis=-1)
        d_r = tf.concat([d_zr, d_r_h], axis=-1)
        return d_xw, d_r, [d_h_z], [d_r_h] if params else []

    def recurrent_step(self, xw_t, states, params, recurrent_mask=None):
        h_tm1 = states[0]
        u = self.units
        h_in = h_tm1 if recurrent_mask is None else h_tm1 * recurrent_mask
        x_zr, x_h = split(xw_t, [2 * u, u])
        if self.reset_after:
            U, b_recurrent = params
            # One (u, 3u) matmul; r multiplies U_h h + b_h after it.
            uh_zr, uh_h = split(recurrent_matmul(h_in, U, b_recurrent), [2 * u, u])
        else:
            U_zr, U_h, b_zr, b_h = params
            uh_zr = recurrent_matmul(h_in, U_zr, b_zr)
        # z and r side by side: one activation for both gates.
        z, r = ops.split(self.recurrent_activation(x_zr + uh_zr), 2, axis=-1)
        if self.reset_after:
            h_tilde = self.activation(x_h + r * uh_h)
        else:
            h_tilde = self.activation(x_h + recurrent_matmul(r * h_in, U_h, b_h))
        h = h_tilde + z * (h_tm1 - h_tilde)  # = z ⊙ h_{t-1} + (1 − z) ⊙ ĥ, one op less
        return h, [h]

    def get_config(self):
        return {**super().get_config(), "reset_after": self.reset_after}


@keras.saving.register_keras_serializable(package="keras_seq")
class GRU(RecurrentLayer):
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
            return_sequences=return_sequences, return_state=return_state,
            go_backwards=go_backwards, stateful=stateful, unroll=unroll,
        )
        cell = GRUCell(
            units,
            reset_after=reset_after,
            activation=activation,
            recurrent_activation=recurrent_activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint,
            dropout=dropout,
            recurrent_dropout=recurrent_dropout,
            seed=seed,
            zoneout=zoneout,
            dtype=kwargs.get("dtype"),
            trainable=kwargs.get("trainable", True),
            name="gru_cell",
        )
        super().__init__(
            cell,
            return_sequences=return_sequences,
            return_state=return_state,
            go_backwards=go_backwards,
            stateful=stateful,
            unroll=unroll,
            activity_regularizer=activity_regularizer,
            **kwargs,
        )


GRU.reset_after = delegate_to_cell("reset_after")
