"""The hand-written gradients of the package's cells, for training on TensorFlow.

One `ManualGradient` per cell, named by the cell's
``LoopHints.manual_gradient`` and imported only when a TensorFlow layer
trains (`keras_seq.layers.recurrent.bptt_tensorflow`). Each computes the same
step as its cell's ``step`` (tanh and sigmoid by `fast_tanh` and
`fast_sigmoid`) and its derivative in closed form; the tests check both
against float64 finite differences of NumPy references.
"""

from __future__ import annotations

import tensorflow as tf

from keras_seq.layers.recurrent.backend_tensorflow import TensorFlowOps
from keras_seq.layers.recurrent.bptt_tensorflow import (
    ManualGradient,
    fast_sigmoid,
    fast_tanh,
    sigmoid_grad,
    tanh_grad,
)


class PeepholeLSTMGradient(ManualGradient):
    """`PeepholeLSTMCell`'s derivative. Saved per step: i, f, g = tanh(z_c), o
    (tanh(c) is recomputed)."""

    d_r_is_d_xw = True

    @property
    def saved_widths(self):
        return [self.cell.units] * 4

    def supported(self):
        return self.cell.standard_activations()

    def project(self, xs):
        cell = self.cell
        bias = self.read(cell.bias) if cell.use_bias else None
        return TensorFlowOps.project(xs, self.read(cell.kernel), bias)

    def weights(self):
        cell = self.cell
        return [self.read(w) for w in (cell.recurrent_kernel, cell.input_peephole,
                                       cell.forget_peephole, cell.output_peephole)]

    def forward(self, xw_t, r_t, states, params):
        c_prev = states[1]
        p_i, p_f, p_o = params
        z_i, z_f, z_c, z_o = tf.split(xw_t + r_t, 4, axis=-1)
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
        d_z = tf.concat([d_zi, d_zf, d_zc, d_zo], axis=-1)
        d_c_prev = d_c * f + d_zi * p_i + d_zf * p_f
        return d_z, d_z, [None, d_c_prev], [d_zi * c_prev, d_zf * c_prev, d_zo * c]


class CoupledGateLSTMGradient(ManualGradient):
    """`CoupledGateLSTMCell`'s derivative (with and without peepholes). Saved
    per step: f, g = tanh(z_c), o."""

    d_r_is_d_xw = True

    @property
    def saved_widths(self):
        return [self.cell.units] * 3

    def supported(self):
        return self.cell.standard_activations()

    def project(self, xs):
        cell = self.cell
        bias = self.read(cell.bias) if cell.use_bias else None
        return TensorFlowOps.project(xs, self.read(cell.kernel), bias)

    def weights(self):
        cell = self.cell
        peepholes = (cell.forget_peephole, cell.output_peephole) if cell.use_peepholes else ()
        return [self.read(w) for w in (cell.recurrent_kernel, *peepholes)]

    def forward(self, xw_t, r_t, states, params):
        c_prev = states[1]
        z_f, z_c, z_o = tf.split(xw_t + r_t, 3, axis=-1)
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
        d_z = tf.concat([d_zf, d_zc, d_zo], axis=-1)
        if not params:
            return d_z, d_z, [None, d_c_f], []
        d_c_prev = d_c_f + d_zf * params[0]
        return d_z, d_z, [None, d_c_prev], [d_zf * c_prev, d_zo * states[1]]


class GRUGradient(ManualGradient):
    """`GRUCell`'s derivative, ``reset_after=True`` only (``reset_after=False``
    trains with autodiff). Saved per step: [z, r], h̃, U_h h + b_h."""

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
            return TensorFlowOps.project(xs, self.read(cell.kernel))
        bias = self.read(cell.bias)
        u = cell.units
        extra = tf.concat([bias[1, : 2 * u], tf.zeros((u,), bias.dtype)], 0)
        return TensorFlowOps.project(xs, self.read(cell.kernel), bias[0] + extra)

    def weights(self):
        cell = self.cell
        U = self.read(cell.recurrent_kernel)
        return [U, self.read(cell.bias)[1, 2 * cell.units :]] if cell.use_bias else [U]

    def forward(self, xw_t, r_t, states, params):
        h_prev = states[0]
        u = self.cell.units
        x_zr, x_h = tf.split(xw_t, [2 * u, u], axis=-1)
        r_zr, r_h = tf.split(r_t, [2 * u, u], axis=-1)
        if params:
            r_h = r_h + params[0]
        zr = fast_sigmoid(x_zr + r_zr)
        z, r = tf.split(zr, 2, axis=-1)
        h_tilde = fast_tanh(x_h + r * r_h)
        return [h_tilde + z * (h_prev - h_tilde)], [zr, h_tilde, r_h]

    def backward(self, saved, states_prev, states, d_states, params):
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


class LayerNormLSTMGradient(ManualGradient):
    """`LayerNormLSTMCell`'s derivative (float32 and float64). Saved per
    step: the normalised h U and its 1/σ, the gates (i, f, c̃, o), the
    normalised cell input and its 1/σ."""

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
        return TensorFlowOps.layer_norm(TensorFlowOps.project(xs, self.read(cell.kernel)),
                                        self.read(cell.kernel_norm_gamma), beta,
                                        cell.norm_epsilon)

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
        z_i, z_f, z_c, z_o = tf.split(xw_t + gamma_h * n_h + beta_h, 4, axis=-1)
        i, f, o = fast_sigmoid(z_i), fast_sigmoid(z_f), fast_sigmoid(z_o)
        g = fast_tanh(z_c)
        n_c, rstd_c = _normalise(f * states[1] + i * g, eps)
        c = gamma_c * n_c + beta_c
        h = o * fast_tanh(c)
        return [h, c], [n_h, rstd_h, tf.concat([i, f, g, o], axis=-1), n_c, rstd_c]

    def backward(self, saved, states_prev, states, d_states, params):
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


def _normalise(v, epsilon: float):
    """``((v − mean v) / σ, 1/σ)`` over the last axis, σ = sqrt(var v + ε)."""
    centred = v - tf.reduce_mean(v, axis=-1, keepdims=True)
    inverse_sigma = tf.math.rsqrt(tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True)
                                  + epsilon)
    return centred * inverse_sigma, inverse_sigma


def _normalise_grad(d_normed, normed, inverse_sigma):
    """The gradient of v from that of n = (v − mean v)/σ:
    (1/σ)(dn − mean(dn) − n·mean(dn ⊙ n))."""
    mean = tf.reduce_mean(d_normed, axis=-1, keepdims=True)
    projection = tf.reduce_mean(d_normed * normed, axis=-1, keepdims=True)
    return inverse_sigma * (d_normed - mean - normed * projection)
