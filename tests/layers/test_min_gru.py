"""MinGRU against a NumPy transcription of Feng et al.'s equations (docs/contract.md)."""

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
    """z = σ(W_z x + b_z), h̃ = g(W_h x + b_h), h_t = (1 − z) ⊙ h_{t-1} + z ⊙ h̃."""
    kernel, bias = weights
    pre = x @ kernel + bias
    z, h_tilde = sigmoid(pre[:, :U]), g(pre[:, U:])  # columns z, then h̃
    h = (1 - z) * states[0] + z * h_tilde
    return h, [h]


def make(**kwargs):
    return layers.MinGRU(U, **kwargs)


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


def test_large_pre_activations_give_finite_outputs_and_gradients(gradients):
    layer, _ = built(make, 1, [np.full((1, 2 * U), 1.0), np.zeros(2 * U)])
    x = np.array([[[-500.0], [500.0], [-80.0]]], "float32")
    _, grads = gradients(lambda x: keras.ops.sum(layer(x, training=True)[0]), [x],
                         layer.trainable_weights)
    assert all(np.all(np.isfinite(g)) for g in grads)


def test_jax_cpu_trains_in_the_fused_step_loop_and_the_others_in_the_scan():
    from keras_seq.layers.recurrent import backend, fast_paths

    fused = backend.BACKEND == "jax" and __import__("jax").default_backend() == "cpu"
    expected = fast_paths.STEP_LOOP if fused else fast_paths.PARALLEL
    assert fast_paths.training_form(layers.MinGRUCell(2), False) == expected
    assert fast_paths.training_form(layers.MLSTMCell(2), False) == fast_paths.PARALLEL
    assert fast_paths.training_form(layers.MinGRUCell(2), True) == fast_paths.STEP_LOOP


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_streams_in_keras_litert_and_onnxruntime_like_the_whole_sequence(tmp_path, rng):
    assert_streams_like_the_whole_sequence(make, IN, tmp_path, rng)


def test_layers_of_several_widths_keep_their_static_output_shapes(rng):
    # The scan's compiled loop relaxes its shapes once it has seen several
    # widths; the layers' outputs must keep theirs (a Dense after them needs it).
    x = rng.normal(size=(2, 5, IN)).astype("float32")
    for units in (2, 3, 5):
        inputs = keras.Input((None, IN))
        hidden = layers.MinGRU(units, return_sequences=True)(inputs)
        model = keras.Model(inputs, keras.layers.Dense(1)(layers.MinGRU(units + 1)(hidden)))
        model.compile("sgd", "mse")
        loss = model.train_on_batch(x, np.zeros((2, 1), "float32"))
        assert np.isfinite(loss)
        assert model.layers[1].compute_output_shape((2, 5, IN)) == (2, 5, units)
