"""ScalarMix against ELMo's equation 1 in NumPy."""

import keras
import numpy as np
import pytest

from keras_seq.layers.attention import _masking
from keras_seq.layers.scalar_mix import ScalarMix


def _softmax(w):
    e = np.exp(w - w.max())
    return e / e.sum()


def _scalar_mix_reference(w, gamma, hs):
    """y = γ Σ_j softmax(w)_j h_j."""
    s = _softmax(w.astype("float64"))
    return gamma * sum(s_j * h_j for s_j, h_j in zip(s, hs))


def _hs(rng, n, *shape):
    return [rng.normal(size=shape).astype("float32") for _ in range(n)]


def test_initial_mix_is_the_plain_mean(rng):
    hs = _hs(rng, 3, 2, 4, 5)
    mix = ScalarMix()
    np.testing.assert_allclose(mix(hs), np.mean(hs, axis=0), atol=1e-6)
    np.testing.assert_array_equal(mix.scalar_weights.numpy(), 0.0)
    np.testing.assert_array_equal(mix.gamma.numpy(), 1.0)


def test_matches_numpy_reference_with_random_weights(rng):
    hs = _hs(rng, 4, 2, 3, 5)
    mix = ScalarMix()
    mix.build([h.shape for h in hs])
    w, gamma = rng.normal(size=4).astype("float32"), np.float32(1.8)
    mix.set_weights([w, gamma])
    assert [(v.name, tuple(v.shape)) for v in mix.weights] == [
        ("scalar_weights", (4,)),
        ("gamma", ()),
    ]
    np.testing.assert_allclose(mix(hs), _scalar_mix_reference(w, gamma, hs), atol=1e-5)
    # A tuple of tensors is a list of tensors too.
    np.testing.assert_allclose(mix(tuple(hs)), _scalar_mix_reference(w, gamma, hs), atol=1e-5)


def test_first_input_mask_passes_to_downstream_layers(rng):
    tokens = np.array([[3, 1, 4, 0, 0], [2, 7, 1, 8, 0]])
    token_in = keras.Input((None,), dtype="int32")
    h0 = keras.layers.Embedding(10, 4, mask_zero=True)(token_in)
    h1 = keras.layers.Dense(4)(h0)
    mixed = ScalarMix()([h0, h1])
    pooled = keras.layers.GlobalAveragePooling1D()(mixed)  # a masked mean over time
    model = keras.Model(token_in, [mixed, pooled])
    model.layers[-2].set_weights([np.array([0.3, -0.4], "float32"), np.float32(1.5)])
    y, y_pooled = (np.asarray(t) for t in model(tokens))
    keep = (tokens != 0)[..., None]
    np.testing.assert_allclose(y_pooled, (y * keep).sum(1) / keep.sum(1), atol=1e-5)
    # Eagerly the mask is on the output tensor.
    embedding = model.layers[1]
    embedded = embedding(tokens)
    out = model.layers[-2]([embedded, model.layers[2](embedded)])
    np.testing.assert_array_equal(_masking.keras_mask(out), tokens != 0)


def test_gradients_match_the_analytic_gradient(rng, gradients):
    hs = _hs(rng, 3, 2, 4)
    c = rng.normal(size=(2, 4)).astype("float32")
    mix = ScalarMix()
    mix.build([h.shape for h in hs])
    w, gamma = np.array([0.5, -1.0, 0.2], "float32"), np.float32(0.7)
    mix.set_weights([w, gamma])
    _, (grad_w, grad_gamma) = gradients(
        lambda: keras.ops.sum(mix(hs) * keras.ops.convert_to_tensor(c)),
        (),
        [mix.scalar_weights, mix.gamma],
    )
    # L = γ Σ_j s_j a_j with a_j = Σ c ⊙ h_j, so ∂L/∂γ = Σ_j s_j a_j and
    # ∂L/∂w_k = γ s_k (a_k − Σ_j s_j a_j) (the softmax Jacobian).
    s = _softmax(w.astype("float64"))
    a = np.array([(c * h).sum() for h in hs], "float64")
    np.testing.assert_allclose(grad_gamma, s @ a, rtol=1e-5)
    np.testing.assert_allclose(grad_w, gamma * s * (a - s @ a), rtol=1e-4, atol=1e-6)


def test_keras_file_round_trip(rng, tmp_path):
    inputs = [keras.Input((None, 4)) for _ in range(3)]
    model = keras.Model(inputs, ScalarMix(name="mix")(inputs))
    model.get_layer("mix").set_weights([np.array([1.0, 0.0, -2.0], "float32"), np.float32(2.0)])
    hs = _hs(rng, 3, 2, 5, 4)
    model.save(tmp_path / "mix.keras")
    restored = keras.models.load_model(tmp_path / "mix.keras", safe_mode=True)
    np.testing.assert_allclose(restored(hs), model(hs), atol=1e-6)
    config = model.get_layer("mix").get_config()
    assert ScalarMix.from_config(config).get_config() == config


def test_mixed_precision_output_close_to_float32(rng):
    hs = _hs(rng, 2, 2, 3)
    keras.mixed_precision.set_global_policy("mixed_float16")
    mix = ScalarMix()
    y = mix(hs)
    assert keras.backend.standardize_dtype(y.dtype) == "float16"
    assert keras.backend.standardize_dtype(mix.scalar_weights.dtype) == "float32"
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(keras.ops.cast(y, "float32")), np.mean(hs, 0), atol=1e-2
    )


def test_bad_inputs_raise_errors_naming_layer_argument_and_expectation(rng):
    x = rng.normal(size=(2, 3, 4)).astype("float32")
    with pytest.raises(
        ValueError,
        match=r"^ScalarMix 'mix': invalid value for argument `inputs`: expected a list of "
        r"N >= 1 tensors of one shape, received \[\]\.",
    ):
        ScalarMix(name="mix")([])
    with pytest.raises(
        TypeError,
        match=r"^ScalarMix 'mix': invalid type for argument `inputs`: expected a list of N >= 1 "
        r"tensors of one shape, received a single tensor of shape \(2, 3, 4\)\.",
    ):
        ScalarMix(name="mix")(x)
    mix = ScalarMix(name="mix")
    with pytest.raises(
        ValueError,
        match=r"^ScalarMix 'mix': invalid shape for argument `inputs\[1\]`: expected the shape "
        r"of `inputs\[0\]`, \(2, 3, 4\), received shape \(2, 3, 5\)\.",
    ):
        mix([x, x[..., :1].repeat(5, -1), x])
    assert not mix.built
    with pytest.raises(ValueError, match=r"`inputs\[1\]`: expected the shape of `inputs\[0\]`"):
        ScalarMix()([keras.Input((None, 4)), keras.Input((None, 5))])
    mix([x, x])
    with pytest.raises(ValueError, match=r"'mix'.*`inputs`: expected a list of 2 tensors"):
        mix([x, x, x])
    with pytest.raises(TypeError, match=r"'mix'.*`inputs`.*a single tensor"):
        mix(x)
