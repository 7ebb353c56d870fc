"""MLSTM against a NumPy transcription of the xLSTM paper's mLSTM (docs/contract.md)."""

import keras
import numpy as np
import pytest
from parallel_family import (
    MASK,
    B,
    T,
    assert_bidirectional_forms_agree,
    assert_layer_computes_the_equations,
    assert_parallel_equals_step,
    assert_streams_like_the_whole_sequence,
    assert_training_gradients_match_finite_differences,
    built,
    sigmoid,
    softplus,
)

from keras_seq import layers
from keras_seq.layers.recurrent.m_lstm import CHUNK

IN, U, H = 3, 4, 2
D = U // H


def _projections(x, weights):
    """q, k, v ``(B, H, d)``, ĩ, f̃ ``(B, H)``, o ``(B, u)``."""
    w_q, w_k, w_v, w_gate, b_gate, w_o, b_o = weights
    q, k, v = ((x @ w).reshape(-1, H, D) for w in (w_q, w_k, w_v))
    gates = x @ w_gate + b_gate  # columns ĩ of each head, then f̃ of each head
    return q, k / np.sqrt(D), v, gates[:, :H], gates[:, H:], sigmoid(x @ w_o + b_o)


def step(x, states, weights):
    """m_t = max(log f + m, ĩ), i' = exp(ĩ − m_t), f' = exp(log f + m − m_t);
    C = f' C + i' v kᵀ, n = f' n + i' k, h̃ = C q / max(|nᵀ q|, exp(−m_t)), h = o ⊙ h̃."""
    q, k, v, i_pre, f_pre, o = _projections(x, weights)
    C = states[0].reshape(-1, H, D, D)  # head by head, row-major: C[a, b]
    n, m = states[1].reshape(-1, H, D), states[2]
    log_f = -softplus(-f_pre)
    m_t = np.maximum(log_f + m, i_pre)
    i, f = np.exp(i_pre - m_t), np.exp(log_f + m - m_t)
    C = f[..., None, None] * C + i[..., None, None] * np.einsum("bha,bhc->bhac", v, k)
    n = f[..., None] * n + i[..., None] * k
    numerator = np.einsum("bhac,bhc->bha", C, q)
    denominator = np.maximum(np.abs(np.einsum("bhc,bhc->bh", n, q)), np.exp(-m_t))
    h = o * (numerator / denominator[..., None]).reshape(-1, U)
    return h, [C.reshape(-1, H * D * D), n.reshape(-1, U), m_t]


def make(**kwargs):
    return layers.MLSTM(U, num_heads=H, **kwargs)


def _states(rng, batch=B):
    return [rng.normal(size=(batch, H * D * D)), rng.normal(size=(batch, U)),
            rng.normal(size=(batch, H))]


@pytest.mark.parametrize("masked, go_backwards, initial", [
    (False, False, False), (True, True, True)])
def test_both_forms_compute_the_equations(masked, go_backwards, initial, rng):
    x = rng.normal(size=(B, T, IN)).astype("float32")
    states = _states(rng) if initial else [np.zeros((B, s)) for s in (H * D * D, U, H)]
    _, weights = built(make, IN, rng=rng)
    assert_layer_computes_the_equations(make, step, x, states, weights,
                                        MASK if masked else None, go_backwards)


def test_training_gradients_match_finite_differences(rng, gradients):
    x = rng.normal(size=(2, 5, IN))
    _, weights = built(make, IN, rng=rng)
    assert_training_gradients_match_finite_differences(
        make, step, x, _states(rng, 2), weights, gradients, mask=MASK[1:, :5])


def test_chunked_parallel_form_equals_step_form_over_a_long_masked_sequence(rng):
    steps = 2 * CHUNK + 22  # three chunks, the last one padded
    x = rng.normal(size=(2, steps, IN)).astype("float32")
    mask = np.arange(steps)[None] < np.array([[steps], [CHUNK + 9]])
    mask[0, 70] = False
    assert_parallel_equals_step(make, x, rng, mask, atol=5e-5)


def test_chunked_training_gradients_equal_the_step_forms(rng, gradients):
    # Two chunks: the states carried across chunks are differentiated too.
    steps = CHUNK + 5
    layer, _ = built(make, IN, rng=rng)
    x = rng.normal(size=(2, steps, IN)).astype("float32")
    probe = keras.ops.convert_to_tensor(rng.normal(size=(2, steps, U)).astype("float32"))
    def loss(training):
        return lambda x: keras.ops.sum(layer(x, training=training)[0] * probe)

    grads = [gradients(loss(training), [x], layer.trainable_weights)[1]
             for training in (True, False)]
    for parallel, loop in zip(*grads):
        np.testing.assert_allclose(parallel, loop, atol=2e-4, rtol=1e-4)


def test_bidirectional_masked_forms_agree(rng):
    x = rng.normal(size=(B, T, IN)).astype("float32")
    assert assert_bidirectional_forms_agree(make, x, rng).shape == (B, T, 2 * U)


def _unstabilised(x, weights):
    """The paper's equations without m, in float64: C̄ = f C̄ + exp(ĩ) v kᵀ,
    n̄ = f n̄ + exp(ĩ) k, h̃ = C̄ q / max(|n̄ᵀ q|, 1) (exp(80) is finite in float64)."""
    C, n = np.zeros((x.shape[0], H, D, D)), np.zeros((x.shape[0], H, D))
    for t in range(x.shape[1]):
        q, k, v, i_pre, f_pre, o = _projections(x[:, t], weights)
        f, i = sigmoid(f_pre), np.exp(i_pre)
        C = f[..., None, None] * C + i[..., None, None] * np.einsum("bha,bhc->bhac", v, k)
        n = f[..., None] * n + i[..., None] * k
        denominator = np.maximum(np.abs(np.einsum("bhc,bhc->bh", n, q)), 1.0)
        h = o * (np.einsum("bhac,bhc->bha", C, q) / denominator[..., None]).reshape(-1, U)
    return h


def test_gate_pre_activations_up_to_80_stay_finite_and_exact(gradients, rng):
    # ĩ and f̃ at ±80 from the bias: exp(80) overflows float32 without m.
    layer, weights = built(make, IN, rng=rng)
    x = rng.normal(size=(2, 4, IN)).astype("float32")
    for level in (-80.0, 80.0):
        weights[4] = np.array([level] * H + [-level] * H)
        layer.set_weights([w.astype("float32") for w in weights])
        want = _unstabilised(x.astype("float64"), weights)
        for training in (False, True):
            got = np.asarray(keras.ops.convert_to_numpy(layer(x, training=training)[0]))
            np.testing.assert_allclose(got[:, -1], want, atol=1e-5, rtol=1e-5,
                                       err_msg=f"{level}, {training}")
        _, grads = gradients(lambda x: keras.ops.sum(layer(x, training=True)[0]), [x],
                             layer.trainable_weights)
        assert all(np.all(np.isfinite(g)) for g in grads), level


def test_state_layout_is_row_major_value_times_key():
    # One step from zero states with ĩ = 0 ≥ log f: i' = 1, so C = v kᵀ, n = k.
    layer, weights = built(make, IN, [np.eye(IN, U), 2 * np.eye(IN, U), 3 * np.eye(IN, U),
                                      np.zeros((IN, 2 * H)), np.zeros(2 * H),
                                      np.zeros((IN, U)), np.zeros(U)])
    x = np.array([[[1.0, 2.0, 3.0]]], "float32")
    _, C, n, m = (np.asarray(keras.ops.convert_to_numpy(t)) for t in layer(x))
    v, k = 3 * np.array([1.0, 2.0, 3.0, 0.0]), 2 * np.array([1.0, 2.0, 3.0, 0.0]) / np.sqrt(D)
    expected = np.concatenate([np.outer(v[:2], k[:2]).ravel(), np.outer(v[2:], k[2:]).ravel()])
    np.testing.assert_allclose(C[0], expected, rtol=1e-6)
    np.testing.assert_allclose(n[0], k, rtol=1e-6)
    np.testing.assert_allclose(m[0], 0.0, atol=1e-7)


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_streams_in_keras_litert_and_onnxruntime_like_the_whole_sequence(tmp_path, rng):
    assert_streams_like_the_whole_sequence(make, IN, tmp_path, rng)
