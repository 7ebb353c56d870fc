"""MinLSTM against a NumPy transcription of Feng et al.'s equations (docs/contract.md)."""

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
)

from keras_seq import layers

IN, U = 3, 4


def g(v):
    return np.where(v >= 0, v + 0.5, sigmoid(v))


def step(x, states, weights):
    """f = σ(W_f x + b_f), i = σ(W_i x + b_i), h̃ = g(W_h x + b_h),
    h_t = f/(f + i) ⊙ h_{t-1} + i/(f + i) ⊙ h̃."""
    kernel, bias = weights
    pre = x @ kernel + bias
    f, i, h_tilde = sigmoid(pre[:, :U]), sigmoid(pre[:, U:2 * U]), g(pre[:, 2 * U:])
    h = f / (f + i) * states[0] + i / (f + i) * h_tilde
    return h, [h]


def make(**kwargs):
    return layers.MinLSTM(U, **kwargs)


@pytest.mark.parametrize("masked, go_backwards, initial", [
    (False, False, False), (True, True, True)])
def test_both_forms_compute_the_equations(masked, go_backwards, initial, rng):
    x = rng.normal(size=(B, T, IN)).astype("float32")
    states = [rng.normal(size=(B, U)) if initial else np.zeros((B, U))]
    _, weights = built(make, IN, rng=rng)
    assert_layer_computes_the_equations(make, step, x, states, weights,
                                        MASK if masked else None, go_backwards)


def test_training_gradients_match_finite_differences(rng, gradients):
    x = rng.normal(size=(2, 5, IN))
    _, weights = built(make, IN, rng=rng)
    assert_training_gradients_match_finite_differences(
        make, step, x, [rng.normal(size=(2, U))], weights, gradients, mask=MASK[1:, :5])


def test_parallel_form_equals_step_form_over_a_long_masked_sequence(rng):
    x = rng.normal(size=(2, 300, IN)).astype("float32")
    mask = np.arange(300)[None] < np.array([[300], [170]])
    assert_parallel_equals_step(make, x, rng, mask)


def test_bidirectional_masked_forms_agree(rng):
    x = rng.normal(size=(B, T, IN)).astype("float32")
    assert assert_bidirectional_forms_agree(make, x, rng).shape == (B, T, 2 * U)


def test_gates_that_both_underflow_still_split_evenly_with_finite_gradients(gradients):
    # f̃ = ĩ = x and h̃'s pre-activation 1: at x = -500 both f and i are 0 in
    # float32, and f/(f + i) would be 0/0; the normalised gates are 1/2 each.
    kernel = np.concatenate([np.ones((1, 2 * U)), np.zeros((1, U))], axis=1)
    bias = np.concatenate([np.zeros(2 * U), np.ones(U)])
    layer, _ = built(make, 1, [kernel, bias])
    x = np.array([[[-500.0], [500.0], [-80.0]]], "float32")
    sequence = np.asarray(layer(x, training=False)[0])
    np.testing.assert_allclose(sequence[0, 0], 0.5 * 1.5, rtol=1e-6)
    _, grads = gradients(lambda x: keras.ops.sum(layer(x, training=True)[0]), [x],
                         layer.trainable_weights)
    assert all(np.all(np.isfinite(g)) for g in grads)


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_streams_in_keras_litert_and_onnxruntime_like_the_whole_sequence(tmp_path, rng):
    assert_streams_like_the_whole_sequence(make, IN, tmp_path, rng)
