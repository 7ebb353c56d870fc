"""LSTM with layer normalisation (Ba, Kiros & Hinton, 2016), as TensorFlow Addons' cell."""

from __future__ import annotations

import math

import keras
from keras import initializers, ops

from keras_seq._validation import check_bool, check_float
from keras_seq.layers._recurrent_base import (
    RecurrentCell,
    validate_recurrent_args,
)
from keras_seq.layers._recurrent_driver import compiled_by_xla, matmul, project, split
from keras_seq.layers._recurrent_layer import RecurrentLayer, delegate_to_cell


def _check_norm_epsilon(owner: str, norm_epsilon) -> float:
    return check_float(owner, "norm_epsilon", norm_epsilon, low=0.0, low_inclusive=False)


def _layer_norm(v, gamma, beta, epsilon: float, centred: bool = False):
    """``γ ⊙ (v − mean(v)) / sqrt(var(v) + ε) + β`` over the last axis
    (``beta=None``: without ``+ β``).

    float16 and bfloat16 inputs are normalised in float32 and cast back, as
    `keras.layers.LayerNormalization` does: their variance loses too much.
    ``gamma`` and ``beta`` come in the dtype the statistics are computed in.
    ``centred``: ``v`` has mean 0 already (a product with `_centre_columns`'
    kernel), the mean is not subtracted again.

    Written as ``(v ⊙ γ√n) · rsqrt(Σ v² + nε)`` (n the width): in a step,
    ``v ⊙ γ√n`` runs beside the statistics, and the chain of ops each
    waiting for the last, which TensorFlow's executor pays per op, is two
    shorter than ``v · rsqrt(Σ v² / n + ε) · γ``.
    """
    dtype = keras.backend.standardize_dtype(v.dtype)
    if dtype in ("float16", "bfloat16"):
        v = ops.cast(v, "float32")
    # Sums, not ops.mean: Keras' PyTorch mean of float64 is computed in float32.
    width = v.shape[-1]
    if not centred:
        v = v - ops.sum(v, axis=-1, keepdims=True) * (1.0 / width)
    scaled = v * (gamma * math.sqrt(width))
    normed = scaled * ops.rsqrt(ops.sum(ops.square(v), axis=-1, keepdims=True) + width * epsilon)
    if beta is not None:
        normed = normed + beta
    return ops.cast(normed, dtype)


def _centre_columns(kernel):
    """``W`` minus the mean of each row: ``x W_c = x W − mean(x W)``."""
    return kernel - ops.sum(kernel, axis=-1, keepdims=True) * (1.0 / kernel.shape[-1])


def _fold_layer_norm(kernel, gamma):
    """``(W_c ⊙ γ, W_c W_cᵀ / n)`` of a kernel ``W (in, n)`` whose products
    ``x W`` are layer-normalised, W_c being W minus the mean of each row.

    Both norms over a product fold into the kernel: ``x W_c = x W −
    mean(x W)`` (the centring moves into the weights) and ``mean((x W_c)²) =
    (x G) · x`` with ``G = W_c W_cᵀ / n``. So ``LN(x W) = (x (W_c ⊙ γ)) ·
    rsqrt((x G) · x + ε) + β``: two matmuls, the second only ``in`` wide,
    and one pass over the ``(…, n)`` product instead of six.
    """
    centred = _centre_columns(kernel)
    gram = matmul(centred, centred, transpose_b=True) * (1.0 / kernel.shape[-1])
    return centred * gamma, gram


def _folded_inverse_sigma(x, gram, epsilon: float):
    """``rsqrt(var(x W) + ε)`` of each row of ``x`` (``(…, 1)``) from
    `_fold_layer_norm`'s Gram matrix. The variance is clamped at 0 against
    rounding (it is a sum of squares; `ops.relu`, as Keras' PyTorch
    ``maximum(float64, 0.0)`` returns float32)."""
    variance = ops.relu(ops.sum(project(x, gram) * x, axis=-1, keepdims=True))
    return ops.rsqrt(variance + epsilon)


def _folded_norm(x, scaled_kernel, gram, epsilon: float):
    """``LN(x W) − β`` from `_fold_layer_norm`'s pair, ``x`` of rank 2 or 3."""
    return project(x, scaled_kernel) * _folded_inverse_sigma(x, gram, epsilon)


def _normalise(v, epsilon: float):
    """``((v − mean v) / σ, 1/σ)`` over the last axis, σ = sqrt(var v + ε)
    (TensorFlow: the hand-written gradient's forward step)."""
    import tensorflow as tf

    centred = v - tf.reduce_mean(v, axis=-1, keepdims=True)
    inverse_sigma = tf.math.rsqrt(tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True)
                                  + epsilon)
    return centred * inverse_sigma, inverse_sigma


def _normalise_grad(d_normed, normed, inverse_sigma):
    """The gradient of v from that of n = (v − mean v)/σ:
    (1/σ)(dn − mean(dn) − n·mean(dn ⊙ n))."""
    import tensorflow as tf

    mean = tf.reduce_mean(d_normed, axis=-1, keepdims=True)
    projection = tf.reduce_mean(d_normed * normed, axis=-1, keepdims=True)
    return inverse_sigma * (d_normed - mean - normed * projection)


@keras.saving.register_keras_serializable(package="keras_seq")
class LayerNormLSTMCell(RecurrentCell):
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

    def _read_norm(self, variable, batch_size=None):
        """γ or β in the dtype `_layer_norm` computes in (float32 under mixed
        precision), per example when ``batch_size`` is given (see
        `RecurrentCell.read_per_example`)."""
        dtype = self.compute_dtype
        if dtype in ("float16", "bfloat16"):
            dtype = "float32"
        value = ops.cast(variable, dtype)
        if batch_size is None:
            return value
        return ops.broadcast_to(value, (batch_size, variable.shape[0]))

    def project_inputs(self, x, bias=True):
        """The input's part of the gate pre-activations ``z``, in one of
        three forms:

        - ``bias=False``, the layer's loop over a whole sequence (rank 3)
          when `_normalises_projection`: ``LN_x(x W) + β_h + b``, every
          term of ``z`` but LN_h's normalised ``γ_h ⊙ n_h``; the step adds
          only that.
        - ``bias=False`` otherwise: ``x @ kernel``; the step normalises each
          row itself (LN_x) and adds the β's and b.
        - ``bias=True`` (the hand-written gradient's loop): ``LN_x(x W) + b``,
          the whole sequence normalised before the loop (β_h is the loop's).

        Why two inference forms (benchmarks/RESULTS.md, "More cells"): under
        XLA, LN_x in the step is fused into the step's other elementwise
        ops, while normalising the projection of every step at once writes a
        second ``(T, B, 4u)`` tensor, a fresh allocation per call whose page
        faults made the B64 forward pass 1.8× Keras' LSTM. TensorFlow's
        executor runs each of LN_x's ops separately at every step; there the
        norm goes into the projection instead, without that second tensor:
        ``LN_x(x W) − β_x = (x ⊙ r) (W_c ⊙ γ_x)`` with ``r = rsqrt(var(x W) +
        ε)`` per row, its variance from the Gram matrix of `_fold_layer_norm`.
        """
        if not bias:
            if len(x.shape) == 3 and self._normalises_projection():
                scaled, inverse_sigma = self._folded_input_norm(x)
                return project(x * inverse_sigma, scaled, self._summed_betas())
            return super().project_inputs(x, bias=False)
        kernel = self.read_weight(self.kernel)
        beta = self._read_norm(self.kernel_norm_beta)
        if self.use_bias:
            beta = beta + self._read_norm(self.bias)  # b folded into β_x: no extra add
        gamma = self._read_norm(self.kernel_norm_gamma)
        if self._folds_norms() and len(x.shape) == 3:  # all steps at once
            scaled, gram = _fold_layer_norm(kernel, gamma)
            return _folded_norm(x, scaled, gram, self.norm_epsilon) + beta
        return _layer_norm(project(x, kernel), gamma, beta, self.norm_epsilon)

    def _folded_input_norm(self, x):
        """``(W_c ⊙ γ_x, r)``: with them ``(x ⊙ r) (W_c ⊙ γ_x) = LN_x(x W) −
        β_x``, ``r = rsqrt(var(x W) + ε)`` of each row of ``x`` (``(…, 1)``)."""
        scaled, gram = _fold_layer_norm(
            self.read_weight(self.kernel), self._read_norm(self.kernel_norm_gamma)
        )
        return scaled, _folded_inverse_sigma(x, gram, self.norm_epsilon)

    def _summed_betas(self):
        """``β_x + β_h + b``: LN_x(x W) + LN_h(h U) + b has one additive term."""
        beta = self._read_norm(self.kernel_norm_beta) + self._read_norm(self.recurrent_norm_beta)
        if self.use_bias:
            beta = beta + self._read_norm(self.bias)
        return beta

    def _normalises_projection(self) -> bool:
        """Whether the layer's loop takes LN_x(x W) and all the β's from the
        projection (`project_inputs`): float32/float64 outside XLA
        (`compiled_by_xla`), with inputs no wider than the units. (Outside
        XLA every backend projects whole sequences before the loop, see
        `hoist_projection`, so `recurrent_weights` and `project_inputs`
        agree on the form.)

        The fold costs a product ``x G`` of ``in × in`` per row on top of the
        projection's ``in × 4u``. Measured on a 2-core CPU (B64, T100, u256,
        against LN_x in the step; `benchmarks/layernorm_forms.py`): faster
        up to ``in = u``, slower at ``1.5 u`` and ``2 u``.
        """
        return (self._folds_norms() and not compiled_by_xla()
                and self.kernel.shape[0] <= self.units)

    def _folds_norms(self) -> bool:
        """LN_x folded into the kernel (`_fold_layer_norm`, the hand-written
        gradient's projection of a whole sequence) and LN_h's centring into
        U (`_centres_recurrent_kernel`), in float32 and float64; float16 and
        bfloat16 take the statistics of the product in float32 instead
        (`_layer_norm`). Only where the fold is paid once for many steps; a
        single step (the cell's ``call``, the decoder) normalises its
        products directly."""
        return self.compute_dtype in ("float32", "float64")

    def _centres_recurrent_kernel(self, batch_size) -> bool:
        """The layer's loop (``batch_size`` given; γ_h then comes per example)
        in float32/float64 takes U with centred rows, so that LN_h need not
        subtract the mean of h U at every step. (Its Gram fold, as for LN_x,
        would cost u·u·4u per call: more than it saves at small batches.)"""
        return self._folds_norms() and batch_size is not None

    def recurrent_weights(self, batch_size=None, bptt=False):
        """``[U, γ_h, β_x + β_h + b, γ_c, β_c, γ_x]``, U with centred rows in
        the layer's loop (`_centres_recurrent_kernel`). In the layer's loop
        (``batch_size`` given) with `_normalises_projection`, the β's and γ_x
        are in the projection and their places hold None. With ``bptt``
        ``[U, γ_h, β_h, γ_c, β_c]`` as stored (LN_x and the bias are then
        in the projection)."""
        if bptt:
            return [
                self.read_weight(self.recurrent_kernel),
                *(self._read_norm(w) for w in (
                    self.recurrent_norm_gamma, self.recurrent_norm_beta,
                    self.state_norm_gamma, self.state_norm_beta,
                )),
            ]
        recurrent_kernel = self.read_weight(self.recurrent_kernel)
        if self._centres_recurrent_kernel(batch_size):
            recurrent_kernel = _centre_columns(recurrent_kernel)
        weights = [
            recurrent_kernel,
            self._read_norm(self.recurrent_norm_gamma, batch_size),
            None,
            self._read_norm(self.state_norm_gamma, batch_size),
            self._read_norm(self.state_norm_beta, batch_size),
            None,
        ]
        if batch_size is None or not self._normalises_projection():
            # LN_x(xW) + LN_h(hU) + b = γ_x ⊙ n_x + γ_h ⊙ n_h + (β_x + β_h + b):
            # one add per step instead of three.
            beta = self._summed_betas()
            if batch_size is not None:
                beta = ops.broadcast_to(beta, (batch_size, 4 * self.units))
            weights[2] = beta
            weights[5] = self._read_norm(self.kernel_norm_gamma, batch_size)
        return weights

    # Under XLA LN_x runs in the step (`project_inputs`); with x_t W
    # computed there too, the loop measured faster at B64 and a little
    # slower at B1 (benchmarks/RESULTS.md, "More cells").
    projects_in_step_under_xla = True

    # Hand-written gradient for training on TensorFlow (the bptt_* hooks of
    # RecurrentCell). Saved per step: the normalised h U and its 1/σ, the
    # gates (i, f, c̃, o), the normalised cell input and its 1/σ.
    bptt_d_r_is_d_xw = False

    @property
    def bptt_saved_widths(self):
        u = self.units
        return [4 * u, 1, 4 * u, u, 1]

    def bptt_supported(self):
        # The statistics of float16 inputs are taken in float32 (`_layer_norm`):
        # the hand-written step is for float32 and float64.
        return self.standard_activations() and self.compute_dtype in ("float32", "float64")

    def bptt_forward(self, xw_t, r_t, states, params):
        import tensorflow as tf

        from keras_seq.layers._bptt import fast_sigmoid, fast_tanh

        gamma_h, beta_h, gamma_c, beta_c = params
        n_h, rstd_h = _normalise(r_t, self.norm_epsilon)
        z_i, z_f, z_c, z_o = tf.split(xw_t + gamma_h * n_h + beta_h, 4, axis=-1)
        i, f, o = fast_sigmoid(z_i), fast_sigmoid(z_f), fast_sigmoid(z_o)
        g = fast_tanh(z_c)
        n_c, rstd_c = _normalise(f * states[1] + i * g, self.norm_epsilon)
        c = gamma_c * n_c + beta_c
        h = o * fast_tanh(c)
        return [h, c], [n_h, rstd_h, tf.concat([i, f, g, o], axis=-1), n_c, rstd_c]

    def bptt_backward(self, saved, states_prev, states, d_states, params):
        import tensorflow as tf

        from keras_seq.layers._bptt import fast_tanh, sigmoid_grad, tanh_grad

        n_h, rstd_h, gates, n_c, rstd_c = saved
        i, f, g, o = tf.split(gates, 4, axis=-1)
        gamma_h, _, gamma_c, _ = params
        d_h, d_c = d_states
        tanh_c = fast_tanh(states[1])  # recomputed rather than stored
        d_zo = sigmoid_grad(o, d_h * tanh_c)
        d_c = d_c + tanh_grad(tanh_c, d_h * o)
        d_s = _normalise_grad(d_c * gamma_c, n_c, rstd_c)  # through LN_c
        d_zi = sigmoid_grad(i, d_s * g)
        d_zf = sigmoid_grad(f, d_s * states_prev[1])
        d_zc = tanh_grad(g, d_s * i)
        d_z = tf.concat([d_zi, d_zf, d_zc, d_zo], axis=-1)
        d_r = _normalise_grad(d_z * gamma_h, n_h, rstd_h)  # through LN_h
        return d_z, d_r, [None, d_s * f], [d_z * n_h, d_z, d_c * n_c, d_c]

    def recurrent_step(self, xw_t, states, weights, recurrent_mask=None):
        h_tm1, c_tm1 = states
        U, gamma_h, beta, gamma_c, beta_c, gamma_x = weights
        eps = self.norm_epsilon
        h_in = h_tm1 if recurrent_mask is None else h_tm1 * recurrent_mask
        # In the layer's loop γ_h comes per example (rank 2) and U with
        # centred rows (`_centres_recurrent_kernel`).
        centred = self._centres_recurrent_kernel(None if len(gamma_h.shape) == 1 else 1)
        z = _layer_norm(matmul(h_in, U), gamma_h, beta, eps, centred=centred)  # (B, 4u)
        if gamma_x is None:
            z = xw_t + z  # LN_x(x W) + β_x + β_h + b from `project_inputs`
        else:
            # xw_t is x W; beta carries β_x, β_h and b.
            z = _layer_norm(xw_t, gamma_x, None, eps) + z
        z_i, z_f, z_c, z_o = split(z, 4)
        i = self.recurrent_activation(z_i)
        f = self.recurrent_activation(z_f)
        c_tilde = self.activation(z_c)
        o = self.recurrent_activation(z_o)
        c = _layer_norm(f * c_tm1 + i * c_tilde, gamma_c, beta_c, eps)
        h = o * self.activation(c)
        return h, [h, c]

    def get_config(self):
        config = {
            "unit_forget_bias": self.unit_forget_bias,
            "norm_epsilon": self.norm_epsilon,
            "norm_gamma_initializer": initializers.serialize(self.norm_gamma_initializer),
            "norm_beta_initializer": initializers.serialize(self.norm_beta_initializer),
        }
        return {**super().get_config(), **config}


@keras.saving.register_keras_serializable(package="keras_seq")
class LayerNormLSTM(RecurrentLayer):
    """Layer-normalised LSTM layer (TensorFlow Addons' `LayerNormLSTMCell` over time).

    Runs `LayerNormLSTMCell` over time (see its equations and weights).
    Without XLA the input projection x W of all steps is computed before the
    time loop, with LN_x folded into it when ``input_dim <= units``;
    otherwise each step normalises its own row, and under XLA on the CPU
    computes its x_t W too (see `LayerNormLSTMCell.project_inputs`).

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
            return_sequences=return_sequences, return_state=return_state,
            go_backwards=go_backwards, stateful=stateful, unroll=unroll,
        )
        _check_norm_epsilon(owner, norm_epsilon)
        cell = LayerNormLSTMCell(
            units,
            activation=activation,
            recurrent_activation=recurrent_activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer,
            unit_forget_bias=unit_forget_bias,
            norm_epsilon=norm_epsilon,
            norm_gamma_initializer=norm_gamma_initializer,
            norm_beta_initializer=norm_beta_initializer,
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
            name="layernorm_lstm_cell",
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


for _name in ("unit_forget_bias", "norm_epsilon", "norm_gamma_initializer",
              "norm_beta_initializer"):
    setattr(LayerNormLSTM, _name, delegate_to_cell(_name))
del _name
