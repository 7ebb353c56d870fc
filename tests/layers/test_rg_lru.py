"""RGLRU against a NumPy transcription of Griffin's equations (docs/contract.md)."""

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

IN = U = 4
C = 8.0


def step(x, states, weights):
    """r = σ(W_a x + b_a), i = σ(W_x x + b_x), log a = c·r ⊙ log σ(Λ),
    h_t = a ⊙ h_{t-1} + √(1 − a²) ⊙ (i ⊙ x)."""
    w_a, b_a, w_x, b_x, lam = weights
    r, i = sigmoid(x @ w_a + b_a), sigmoid(x @ w_x + b_x)
    a = np.exp(C * r * np.log(sigmoid(lam)))
    h = a * states[0] + np.sqrt(1 - a**2) * (i * x)
    return h, [h]


def make(**kwargs):
    return layers.RGLRU(U, **kwargs)


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


def test_decay_starts_in_griffins_range_and_weights_have_the_contract_layout():
    layer = layers.RGLRU(64, c=4.0, seed=3)
    layer.build((None, None, 64))
    assert [w.path.split("/")[-1] for w in layer.weights] == [
        "recurrence_gate_kernel", "recurrence_gate_bias", "input_gate_kernel",
        "input_gate_bias", "a_param"]
    decay = sigmoid(np.asarray(layer.get_weights()[-1], "float64")) ** 4.0  # σ(Λ)^c
    assert decay.min() >= 0.9 - 1e-6 and decay.max() <= 0.999 + 1e-6 and decay.std() > 0.01


def test_input_width_other_than_units_is_a_value_error_naming_the_layer():
    with pytest.raises(ValueError, match=r"RGLRUCell.*`inputs`.*4 features"):
        layers.RGLRU(U)(np.zeros((1, 2, 3), "float32"))


def test_closed_recurrence_gate_gives_finite_gradients(gradients):
    # r = σ(-200) = 0: a = 1 and √(1 − a²) = 0, whose derivative is infinite.
    layer, _ = built(make, U, [np.zeros((U, U)), np.full(U, -200.0), np.zeros((U, U)),
                               np.zeros(U), np.zeros(U)])
    x = np.ones((1, 3, U), "float32")
    _, grads = gradients(lambda x: keras.ops.sum(layer(x, training=True)[0]), [x],
                         layer.trainable_weights)
    assert all(np.all(np.isfinite(g)) for g in grads)


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_streams_in_keras_litert_and_onnxruntime_like_the_whole_sequence(tmp_path, rng):
    assert_streams_like_the_whole_sequence(make, IN, tmp_path, rng)
