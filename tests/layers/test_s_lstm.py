"""SLSTM against a NumPy transcription of the xLSTM paper's sLSTM (docs/contract.md)."""

import keras
import numpy as np
import pytest
from parallel_family import (
    MASK,
    B,
    T,
    assert_bidirectional_forms_agree,
    assert_layer_computes_the_equations,
    assert_streams_like_the_whole_sequence,
    assert_training_gradients_match_finite_differences,
    built,
    sigmoid,
    softplus,
)

from keras_seq import layers

IN, U, H = 3, 4, 2
D = U // H


def recurrent_part(h, R):
    """Head j's h_{t-1}[:, j·d:(j+1)·d] @ R[j, :, g, :] in columns j·d … of gate block g."""
    heads, d, gates, _ = R.shape
    out = np.zeros((h.shape[0], gates * heads * d))
    for j in range(heads):
        for g in range(gates):
            start = g * heads * d + j * d
            out[:, start:start + d] = h[:, j * d:(j + 1) * d] @ R[j, :, g, :]
    return out


def step(x, states, weights):
    """[ĩ, f̃, z̃, õ] = x W + b + h R; m_t = max(log f + m, ĩ); i' = exp(ĩ − m_t),
    f' = exp(log f + m − m_t); c = f' c + i' tanh(z̃); n = f' n + i'; h = σ(õ) c / n."""
    kernel, R, bias = weights
    h, c, n, m = states
    i_pre, f_pre, z_pre, o_pre = np.split(x @ kernel + bias + recurrent_part(h, R), 4, axis=-1)
    log_f = -softplus(-f_pre)
    m_t = np.maximum(log_f + m, i_pre)
    i, f = np.exp(i_pre - m_t), np.exp(log_f + m - m_t)
    c = f * c + i * np.tanh(z_pre)
    n = f * n + i
    h = sigmoid(o_pre) * c / n
    return h, [h, c, n, m_t]


def make(**kwargs):
    return layers.SLSTM(U, num_heads=H, **kwargs)


def _states(rng, batch=B):
    h, c, m = (rng.normal(size=(batch, U)) for _ in range(3))
    return [h, c, np.abs(rng.normal(size=(batch, U))) + 0.5, m]  # n > 0, as from zeros


@pytest.mark.parametrize("masked, go_backwards, initial", [
    (False, False, False), (True, True, True)])
def test_both_forms_compute_the_equations(masked, go_backwards, initial, rng):
    x = rng.normal(size=(B, T, IN)).astype("float32")
    states = _states(rng) if initial else [np.zeros((B, U))] * 4
    _, weights = built(make, IN, rng=rng)
    assert_layer_computes_the_equations(make, step, x, states, weights,
                                        MASK if masked else None, go_backwards)


def test_training_gradients_match_finite_differences(rng, gradients):
    x = rng.normal(size=(2, 5, IN))
    _, weights = built(make, IN, rng=rng)
    assert_training_gradients_match_finite_differences(
        make, step, x, _states(rng, 2), weights, gradients, mask=MASK[1:, :5])


def test_bidirectional_masked_forms_agree(rng):
    x = rng.normal(size=(B, T, IN)).astype("float32")
    assert assert_bidirectional_forms_agree(make, x, rng).shape == (B, T, 2 * U)


def _unstabilised(x, weights):
    """The paper's equations without m, in float64: c̄ = f c̄ + exp(ĩ) z,
    n̄ = f n̄ + exp(ĩ), h = σ(õ) c̄ / n̄ (exp(80) is finite in float64)."""
    kernel, R, bias = weights
    h = c = n = np.zeros((x.shape[0], U))
    for t in range(x.shape[1]):
        i_pre, f_pre, z_pre, o_pre = np.split(x[:, t] @ kernel + bias + recurrent_part(h, R),
                                              4, axis=-1)
        c = sigmoid(f_pre) * c + np.exp(i_pre) * np.tanh(z_pre)
        n = sigmoid(f_pre) * n + np.exp(i_pre)
        h = sigmoid(o_pre) * c / n
    return h


def test_gate_pre_activations_up_to_80_stay_finite_and_exact(gradients, rng):
    # ĩ and f̃ at ±80 from the bias: exp(80) overflows float32 without m.
    kernel, R = rng.normal(0, 0.3, (IN, 4 * U)), rng.normal(0, 0.3, (H, D, 4, D))
    layer, _ = built(make, IN, [kernel, R, np.zeros(4 * U)])
    x = rng.normal(size=(2, 4, IN)).astype("float32")
    for level in (-80.0, 80.0):
        bias = np.concatenate([np.full(U, level), np.full(U, -level), np.zeros(2 * U)])
        layer.set_weights([kernel.astype("float32"), R.astype("float32"),
                           bias.astype("float32")])
        want = _unstabilised(x.astype("float64"), [kernel, R, bias])
        for training in (False, True):
            h = np.asarray(keras.ops.convert_to_numpy(layer(x, training=training)[1]))
            np.testing.assert_allclose(h, want, atol=1e-5, err_msg=f"{level}, {training}")
        _, grads = gradients(lambda x: keras.ops.sum(layer(x, training=True)[0]), [x],
                             layer.trainable_weights)
        assert all(np.all(np.isfinite(g)) for g in grads), level


def test_recurrent_kernel_has_the_head_wise_layout():
    layer = layers.SLSTM(6, num_heads=3)
    layer.build((None, None, 2))
    assert [tuple(w.shape) for w in layer.weights] == [(2, 24), (3, 2, 4, 2), (24,)]
    with pytest.raises(ValueError, match=r"SLSTMCell: .*`num_heads`.*a divisor of units=6"):
        layers.SLSTM(6, num_heads=4)


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_streams_in_keras_litert_and_onnxruntime_like_the_whole_sequence(tmp_path, rng):
    assert_streams_like_the_whole_sequence(make, IN, tmp_path, rng)
