"""Integer inputs of the recurrent layers: read as their float values in the compute
dtype, as keras.layers.LSTM and keras.layers.GRU read them (their ops promote)."""

import functools

import keras
import numpy as np
import pytest
from keras import ops
from recurrent_family import RECURRENT_CASES, make_recurrent

from keras_seq import layers

B, T, IN, U = 3, 5, 4, 6

CASES = {
    **{case: functools.partial(make_recurrent, case, U) for case in RECURRENT_CASES},
    "ntm": lambda **kw: layers.NTM(U, memory_size=4, memory_width=3, **kw),
}


def _integers(rng, dtype="int32"):
    return rng.integers(-2, 3, size=(B, T, IN)).astype(dtype)


def _mask():
    return np.arange(T)[None, :] < np.array([5, 3, 2])[:, None]


def _randomized(layer, rng):
    layer.build((None, None, IN))
    layer.set_weights(
        [rng.normal(0.0, 0.5, w.shape).astype("float32") for w in layer.get_weights()]
    )
    return layer


def _dtype(tensor):
    return keras.backend.standardize_dtype(tensor.dtype)


# On TensorFlow training=True takes the loop with the hand-written gradient.
@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("case", list(CASES))
def test_integer_inputs_equal_their_float32_values(case, dtype, training, rng):
    layer = _randomized(CASES[case](return_sequences=True, return_state=True), rng)
    x = _integers(rng, dtype)
    got = layer(x, mask=_mask(), training=training)
    want = layer(x.astype("float32"), mask=_mask(), training=training)
    for g, w in zip(got, want):
        assert _dtype(g) == "float32"
        np.testing.assert_allclose(g, w, atol=1e-6)


@pytest.mark.parametrize("case", list(CASES))
def test_cell_in_keras_rnn_takes_integer_inputs(case, rng):
    layer = _randomized(CASES[case](), rng)
    rnn = keras.layers.RNN(layer.cell, return_sequences=True)
    x = _integers(rng)
    y = rnn(x)
    assert _dtype(y) == "float32"
    np.testing.assert_allclose(y, rnn(x.astype("float32")), atol=1e-6)


def _keras_pair(case, rng):
    """(ours, keras.layers.X) with the same weights: GRU as it is, PeepholeLSTM
    with zero peepholes as keras.layers.LSTM."""
    if case == "peephole":
        ours = _randomized(layers.PeepholeLSTM(U, return_sequences=True), rng)
        reference = keras.layers.LSTM(U, return_sequences=True)
        reference.build((None, None, IN))
        reference.set_weights(ours.get_weights()[:3])
        ours.set_weights(ours.get_weights()[:3] + [np.zeros(U, "float32")] * 3)
    else:
        reset_after = case == "gru"
        reference = keras.layers.GRU(U, return_sequences=True, reset_after=reset_after)
        _randomized(reference, rng)
        ours = layers.GRU(U, return_sequences=True, reset_after=reset_after)
        ours.build((None, None, IN))
        ours.set_weights(reference.get_weights())
    return ours, reference


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("case", ["peephole", "gru", "gru_reset_before"])
def test_integer_inputs_equal_keras_layer_with_copied_weights(case, training, rng, gradients):
    ours, reference = _keras_pair(case, rng)
    x, mask = _integers(rng), _mask()
    y = ours(x, mask=mask, training=training)
    assert _dtype(y) == _dtype(reference(x, mask=mask)) == "float32"
    np.testing.assert_allclose(y, reference(x, mask=mask, training=training), atol=1e-6)

    probe = ops.convert_to_tensor(rng.normal(size=(B, T, U)).astype("float32"))

    def weight_grads(layer):
        def loss():
            return ops.sum(layer(x, mask=mask, training=training) * probe)

        return gradients(loss, [], layer.trainable_weights)[1]

    for got, want in zip(weight_grads(ours), weight_grads(reference)):  # kernel, recurrent, bias
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("case", ["peephole", "gru", "ntm"])
def test_integer_inputs_under_mixed_precision_are_float16_close_to_float32(case, rng):
    reference = _randomized(CASES[case](return_sequences=True), rng)
    x = _integers(rng)
    expected = np.asarray(reference(x.astype("float32"), mask=_mask()))
    keras.mixed_precision.set_global_policy("mixed_float16")
    layer = CASES[case](return_sequences=True)
    layer.build((None, None, IN))
    layer.set_weights(reference.get_weights())
    for training in (False, True):
        y = layer(x, mask=_mask(), training=training)
        assert _dtype(y) == "float16"
        np.testing.assert_allclose(np.asarray(y, "float32"), expected, atol=1e-2)


def test_functional_model_with_integer_input_matches_float_input(rng):
    inputs = keras.Input((None, IN), dtype="int32")
    gru = layers.GRU(U, return_sequences=True)
    outputs = layers.PeepholeLSTM(U)(gru(inputs))
    model = keras.Model(inputs, outputs)
    assert model.outputs[0].dtype == "float32"
    x = _integers(rng)
    float_inputs = keras.Input((None, IN))
    float_model = keras.Model(float_inputs, model.layers[-1](gru(float_inputs)))
    np.testing.assert_allclose(model(x), float_model(x.astype("float32")), atol=1e-6)


def test_highway_on_integer_inputs_equals_numpy_of_their_float_values(rng):
    x = rng.integers(-3, 4, size=(2, 5, 4))
    layer = layers.Highway()
    layer.build((None, 5, 4))
    layer.set_weights([rng.normal(size=w.shape).astype("float32") for w in layer.get_weights()])
    W, b, W_t, b_t = (np.asarray(w) for w in (layer.kernel, layer.bias, layer.transform_kernel,
                                              layer.transform_bias))
    xf = x.astype("float32")
    h = np.maximum(xf @ W + b, 0.0)  # relu, Highway's default activation
    t = 1 / (1 + np.exp(-(xf @ W_t + b_t)))
    y = layer(x.astype("int32"))
    assert keras.backend.standardize_dtype(y.dtype) == "float32"
    np.testing.assert_allclose(np.asarray(y), t * h + (1 - t) * xf, rtol=1e-5, atol=1e-5)


def test_multi_head_attention_on_integer_inputs_equals_keras_with_copied_weights(rng):
    query = rng.integers(-3, 4, size=(2, 3, 4))
    value = rng.integers(-3, 4, size=(2, 5, 4))
    ours = layers.MultiHeadAttention(num_heads=2, key_dim=3)
    theirs = keras.layers.MultiHeadAttention(num_heads=2, key_dim=3)
    ours(query.astype("float32"), value.astype("float32"))
    theirs(query.astype("float32"), value.astype("float32"))
    theirs.set_weights([rng.normal(size=w.shape).astype("float32") for w in theirs.get_weights()])
    ours.set_weights(theirs.get_weights())
    expected = theirs(query.astype("float32"), value.astype("float32"))
    y = ours(query.astype("int32"), value.astype("int32"))
    assert keras.backend.standardize_dtype(y.dtype) == "float32"
    np.testing.assert_allclose(np.asarray(y), np.asarray(expected), rtol=1e-5, atol=1e-5)
