"""LSTM with layer normalisation (Ba, Kiros & Hinton, 2016), as TensorFlow Addons' cell."""

from __future__ import annotations

import keras
from keras import initializers, ops

from keras_seq._validation import check_bool, check_float
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
from keras_seq.layers.recurrent.rnn import LoopHints


def _check_norm_epsilon(owner: str, norm_epsilon) -> float:
    return check_float(owner, "norm_epsilon", norm_epsilon, low=0.0, low_inclusive=False)


def _layer_norm(v, gamma, beta, epsilon: float):
    """``γ ⊙ (v − mean(v)) / sqrt(var(v) + ε) + β`` over the last axis
    (``beta=None``: without ``+ β``), in the backend's best form
    (`backend.layer_norm`).

    float16 and bfloat16 inputs are normalised in float32 and cast back, as
    `keras.layers.LayerNormalization` does: their variance loses too much.
    """
    dtype = keras.backend.standardize_dtype(v.dtype)
    compute = "float32" if dtype in ("float16", "bfloat16") else dtype
    v, gamma = ops.cast(v, compute), ops.cast(gamma, compute)
    beta = None if beta is None else ops.cast(beta, compute)
    return ops.cast(backend.layer_norm(v, gamma, beta, epsilon), dtype)


@keras.saving.register_keras_serializable(package="keras_seq")
class LayerNormLSTMCell(GatedCell):
    """One step of an LSTM with layer-normalised gate pre-activations and cell state.

    ```
    z            = LN_x(x W) + LN_h(h_{t-1} U) + b          # (B, 4u)
    z_i, z_f, z_c, z_o = split(z, 4)
    i = σ(z_i)   f = σ(z_f)   c̃ = tanh(z_c)   o = σ(z_o)
    c_t = LN_c(f ⊙ c_{t-1} + i ⊙ c̃)
    h_t = o ⊙ tanh(c_t)
    LN(v) = γ ⊙ (v − mean(v)) / sqrt(var(v) + ε) + β        # over the last axis
    ```

    LN_x and LN_h normalise all 4u gate pre-activations together; each LN has
    its own γ and β. σ is `recurrent_activation` and tanh is `activation`.
    This is TensorFlow Addons' `LayerNormLSTMCell`, with its weights in its
    order (`get_weights()`): `kernel (in, 4u)`, `recurrent_kernel (u, 4u)`,
    `bias (4u,)`, `kernel_norm_gamma (4u,)`, `kernel_norm_beta (4u,)`,
    `recurrent_norm_gamma (4u,)`, `recurrent_norm_beta (4u,)`,
    `state_norm_gamma (u,)`, `state_norm_beta (u,)`. Gates are ordered
    i, f, c, o as in `keras.layers.LSTM`. State `[h, c]`.

    Args:
        units: int, size of h and c.
        unit_forget_bias: bool, default True: forget-gate bias starts at 1.
        norm_epsilon: float > 0, default 1e-3: ε of the three layer norms.
        norm_gamma_initializer: initializer of the three γ, default "ones".
        norm_beta_initializer: initializer of the three β, default "zeros".
        **kwargs: `activation`, `recurrent_activation`, `use_bias`,
            `*_initializer`, `*_regularizer`, `*_constraint`, `dropout`,
            `recurrent_dropout`, `seed`, `zoneout`: as in `PeepholeLSTMCell`
            (zoneout mixes the states after LN_c).

    Examples:
        >>> import numpy as np, keras
        >>> from keras_seq.layers import LayerNormLSTMCell
        >>> rnn = keras.layers.RNN(LayerNormLSTMCell(4))
        >>> rnn(np.zeros((2, 5, 3), "float32")).shape
        TensorShape([2, 4])

    References:
        Ba, Kiros & Hinton, "Layer Normalization", arXiv:1607.06450, 2016.
    """

    def __init__(
        self,
        units: int,
        unit_forget_bias: bool = True,
        norm_epsilon: float = 1e-3,
        norm_gamma_initializer="ones",
        norm_beta_initializer="zeros",
        **kwargs,
    ):
        owner = type(self).__name__
        check_bool(owner, "unit_forget_bias", unit_forget_bias)
        norm_epsilon = _check_norm_epsilon(owner, norm_epsilon)
        super().__init__(units, **kwargs)
        self.unit_forget_bias = bool(unit_forget_bias)
        self.norm_epsilon = norm_epsilon
        self.norm_gamma_initializer = initializers.get(norm_gamma_initializer)
        self.norm_beta_initializer = initializers.get(norm_beta_initializer)
        self.state_size = [self.units, self.units]

    def build(self, input_shape):
        input_dim = self.check_input_shape(input_shape)
        self.add_kernels(input_dim, gates=4)
        self.add_bias(gates=4, forget_gate=1 if self.unit_forget_bias else None)
        gates = 4 * self.units
        self.kernel_norm_gamma, self.kernel_norm_beta = self._add_norm("kernel_norm", gates)
        self.recurrent_norm_gamma, self.recurrent_norm_beta = self._add_norm(
            "recurrent_norm", gates
        )
        self.state_norm_gamma, self.state_norm_beta = self._add_norm("state_norm", self.units)
        self.built = True

    def _add_norm(self, name: str, width: int):
        gamma = self.add_weight(shape=(width,), name=f"{name}_gamma",
                                initializer=self.norm_gamma_initializer)
        beta = self.add_weight(shape=(width,), name=f"{name}_beta",
                               initializer=self.norm_beta_initializer)
        return gamma, beta

    loop_hints = LoopHints(
        pointwise_projection=True,
        output_is_first_state=True,
        # Under XLA on the CPU, x_t W and LN_x next to the step's other work
        # measured faster (benchmarks/RESULTS.md, "More cells").
        projects_in_step_under_xla=True,
    )

    def summed_betas(self):
        """``β_x + β_h + b``: LN_x(x W) + LN_h(h U) + b has one additive term."""
        beta = self.kernel_norm_beta + self.recurrent_norm_beta
        return beta + self.bias if self.use_bias else beta

    def project(self, sequence):
        """``LN_x(x W) + β_h + b``: every term of z but LN_h's ``γ_h ⊙ n_h``."""
        return _layer_norm(backend.project(sequence, self.kernel), self.kernel_norm_gamma,
                           self.summed_betas(), self.norm_epsilon)

    def step(self, inputs, states, training=False):
        h_tm1, c_tm1 = states
        eps = self.norm_epsilon
        h_in = h_tm1
        if training and self.recurrent_dropout > 0.0:
            h_in = h_tm1 * self.get_recurrent_dropout_mask(h_tm1)
        z = inputs + _layer_norm(backend.matmul(h_in, self.recurrent_kernel),
                                 self.recurrent_norm_gamma, None, eps)  # (B, 4u)
        z_i, z_f, z_c, z_o = backend.split(z, 4)
        i = self.recurrent_activation(z_i)
        f = self.recurrent_activation(z_f)
        c_tilde = self.activation(z_c)
        o = self.recurrent_activation(z_o)
        c = _layer_norm(f * c_tm1 + i * c_tilde, self.state_norm_gamma, self.state_norm_beta,
                        eps)
        h = o * self.activation(c)
        return h, [h, c]

    def manual_gradient(self):
        """`step` and its derivative for TensorFlow's training loop (`LayerNormLSTMGradient`)."""
        return LayerNormLSTMGradient(self)

    def get_config(self):
        config = {
            "unit_forget_bias": self.unit_forget_bias,
            "norm_epsilon": self.norm_epsilon,
            "norm_gamma_initializer": initializers.serialize(self.norm_gamma_initializer),
            "norm_beta_initializer": initializers.serialize(self.norm_beta_initializer),
        }
        return {**super().get_config(), **config}


class LayerNormLSTMGradient(ManualGradient):
    """`LayerNormLSTMCell.step` and its derivative (`ManualGradient`), float32
    and float64. Saved per step: the normalised h U and its 1/σ, the gates
    (i, f, c̃, o), the normalised cell input and its 1/σ."""

    @property
    def saved_widths(self):
        u = self.cell.units
        return [4 * u, 1, 4 * u, u, 1]

    def supported(self):
        # The statistics of float16 inputs are taken in float32: the
        # hand-written step is for float32 and float64.
        cell = self.cell
        return cell.standard_activations() and cell.compute_dtype in ("float32", "float64")

    def project(self, xs):
        """LN_x(x W) + b of every step (β_h is the loop's)."""
        cell = self.cell
        beta = self.read(cell.kernel_norm_beta)
        if cell.use_bias:
            beta = beta + self.read(cell.bias)
        return backend.layer_norm(backend.project(xs, self.read(cell.kernel)),
                                  self.read(cell.kernel_norm_gamma), beta, cell.norm_epsilon)

    def weights(self):
        cell = self.cell
        return [self.read(w) for w in (
            cell.recurrent_kernel, cell.recurrent_norm_gamma, cell.recurrent_norm_beta,
            cell.state_norm_gamma, cell.state_norm_beta,
        )]

    def forward(self, xw_t, r_t, states, params):
        eps = self.cell.norm_epsilon
        gamma_h, beta_h, gamma_c, beta_c = params
        n_h, rstd_h = _normalise(r_t, eps)
        z_i, z_f, z_c, z_o = backend.split(xw_t + gamma_h * n_h + beta_h, 4)
        i, f, o = fast_sigmoid(z_i), fast_sigmoid(z_f), fast_sigmoid(z_o)
        g = fast_tanh(z_c)
        n_c, rstd_c = _normalise(f * states[1] + i * g, eps)
        c = gamma_c * n_c + beta_c
        h = o * fast_tanh(c)
        return [h, c], [n_h, rstd_h, ops.concatenate([i, f, g, o], axis=-1), n_c, rstd_c]

    def backward(self, saved, states_prev, states, d_states, params):
        n_h, rstd_h, gates, n_c, rstd_c = saved
        i, f, g, o = backend.split(gates, 4)
        gamma_h, _, gamma_c, _ = params
        d_h, d_c = d_states
        tanh_c = fast_tanh(states[1])  # recomputed rather than stored
        d_zo = sigmoid_grad(o, d_h * tanh_c)
        d_c = d_c + tanh_grad(tanh_c, d_h * o)
        d_s = _normalise_grad(d_c * gamma_c, n_c, rstd_c)  # through LN_c
        d_zi = sigmoid_grad(i, d_s * g)
        d_zf = sigmoid_grad(f, d_s * states_prev[1])
        d_zc = tanh_grad(g, d_s * i)
        d_z = ops.concatenate([d_zi, d_zf, d_zc, d_zo], axis=-1)
        d_r = _normalise_grad(d_z * gamma_h, n_h, rstd_h)  # through LN_h
        return d_z, d_r, [None, d_s * f], [d_z * n_h, d_z, d_c * n_c, d_c]


def _normalise(v, epsilon: float):
    """``((v − mean v) / σ, 1/σ)`` over the last axis, σ = sqrt(var v + ε)."""
    centred = v - ops.mean(v, axis=-1, keepdims=True)
    inverse_sigma = ops.rsqrt(ops.mean(ops.square(centred), axis=-1, keepdims=True) + epsilon)
    return centred * inverse_sigma, inverse_sigma


def _normalise_grad(d_normed, normed, inverse_sigma):
    """The gradient of v from that of n = (v − mean v)/σ:
    (1/σ)(dn − mean(dn) − n·mean(dn ⊙ n))."""
    mean = ops.mean(d_normed, axis=-1, keepdims=True)
    projection = ops.mean(d_normed * normed, axis=-1, keepdims=True)
    return inverse_sigma * (d_normed - mean - normed * projection)


@keras.saving.register_keras_serializable(package="keras_seq")
class LayerNormLSTM(GatedRNN):
    """Layer-normalised LSTM layer (TensorFlow Addons' `LayerNormLSTMCell` over time).

    Runs `LayerNormLSTMCell` over time (see its equations and weights).
    LN_x(x W) of all steps is computed before the time loop, except under
    XLA on the CPU (JAX, TensorFlow with ``jit_compile``), where each step
    computes its own next to its recurrent work.

    `units`, `activation`, `recurrent_activation`, `use_bias`, `*_initializer`,
    `unit_forget_bias`, `norm_epsilon`, `norm_gamma_initializer`,
    `norm_beta_initializer`, `*_regularizer`, `*_constraint`, `dropout`,
    `recurrent_dropout`, `seed` and `zoneout` are as in `LayerNormLSTMCell`;
    `activity_regularizer`, `return_sequences`, `return_state`,
    `go_backwards`, `stateful` and `unroll` as in `PeepholeLSTM`.

    Call arguments: `inputs (B, T, in)`, `mask (B, T)` bool (True = keep),
    `training`, `initial_state` `[h, c]`.

    Examples:
        >>> import numpy as np
        >>> from keras_seq.layers import LayerNormLSTM
        >>> layer = LayerNormLSTM(8, return_sequences=True, return_state=True)
        >>> sequence, h, c = layer(np.ones((2, 5, 3), "float32"))
        >>> sequence.shape, c.shape
        (TensorShape([2, 5, 8]), TensorShape([2, 8]))

    References:
        Ba, Kiros & Hinton, "Layer Normalization", arXiv:1607.06450, 2016.
    """

    cell_class = LayerNormLSTMCell

    def __init__(
        self,
        units: int,
        activation="tanh",
        recurrent_activation="sigmoid",
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        unit_forget_bias: bool = True,
        norm_epsilon: float = 1e-3,
        norm_gamma_initializer="ones",
        norm_beta_initializer="zeros",
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
        **kwargs,
    ):
        owner = type(self).__name__
        validate_recurrent_args(
            owner, units, activation, recurrent_activation, dropout,
            recurrent_dropout, use_bias=use_bias, unit_forget_bias=unit_forget_bias,
        )
        _check_norm_epsilon(owner, norm_epsilon)
        super().__init__(
            units, activation=activation, recurrent_activation=recurrent_activation,
            use_bias=use_bias, kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer, bias_initializer=bias_initializer,
            unit_forget_bias=unit_forget_bias, norm_epsilon=norm_epsilon,
            norm_gamma_initializer=norm_gamma_initializer,
            norm_beta_initializer=norm_beta_initializer, kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer, bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint, bias_constraint=bias_constraint,
            dropout=dropout, recurrent_dropout=recurrent_dropout, seed=seed, zoneout=zoneout,
            return_sequences=return_sequences, return_state=return_state,
            go_backwards=go_backwards, stateful=stateful, unroll=unroll, **kwargs,
        )


for _name in ("unit_forget_bias", "norm_epsilon", "norm_gamma_initializer",
              "norm_beta_initializer"):
    setattr(LayerNormLSTM, _name, delegate_to_cell(_name))
del _name
