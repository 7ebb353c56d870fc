"""LuongAttention against a NumPy reference written from the equations, and
against Keras' own dot-product attention."""

import re

import keras
import numpy as np
import pytest

from keras_seq.layers.attention import _masking
from keras_seq.layers.attention.luong_attention import LuongAttention


def _luong_reference(key_kernel, query, value, key=None, value_mask=None, scale=1.0):
    """e_ij = g q_i · (k_j W_a), α = softmax over unmasked j, c = α V."""
    key = value if key is None else key
    e = scale * np.einsum("bid,bjd->bij", query, key @ key_kernel)
    keep = (
        np.ones_like(e, bool)
        if value_mask is None
        else np.broadcast_to(value_mask[:, None, :], e.shape)
    )
    exp_e = np.where(keep, np.exp(e - np.where(keep, e, -np.inf).max(-1, keepdims=True)), 0.0)
    alpha = exp_e / exp_e.sum(-1, keepdims=True)
    return np.einsum("bij,bjd->bid", alpha, value), alpha


def _x(rng, *shape):
    return rng.normal(size=shape).astype("float32")


def _layer(rng, use_scale, dq=6, dk=5):
    layer = LuongAttention(use_scale=use_scale)
    layer.build((None, None, dq), (None, None, 3), (None, None, dk))
    # Random (not initial) weights, so a scale other than 1 matters.
    layer.set_weights([rng.normal(size=w.shape).astype("float32") for w in layer.get_weights()])
    return layer


def _reference_for(layer, *args, **kwargs):
    weights = layer.get_weights()
    scale = weights[1] if layer.use_scale else 1.0
    return _luong_reference(weights[0], *args, scale=scale, **kwargs)


@pytest.mark.parametrize("use_scale", [False, True])
def test_matches_numpy_reference_with_masks(rng, use_scale):
    layer = _layer(rng, use_scale)
    query, value, key = _x(rng, 2, 4, 6), _x(rng, 2, 5, 3), _x(rng, 2, 5, 5)
    value_mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 1, 0]], bool)
    context, alpha = layer(query, value, key, value_mask=value_mask, return_attention_scores=True)
    context_ref, alpha_ref = _reference_for(layer, query, value, key, value_mask)
    np.testing.assert_allclose(alpha, alpha_ref, atol=1e-5)
    np.testing.assert_allclose(context, context_ref, atol=1e-5)
    np.testing.assert_allclose(np.asarray(alpha).sum(-1), 1.0, atol=1e-6)
    assert np.all(np.asarray(alpha)[1][:, [2, 4]] == 0.0)


@pytest.mark.parametrize("use_scale", [False, True])
def test_single_step_query_with_precomputed_keys_equals_sequence_query(rng, use_scale):
    layer = _layer(rng, use_scale)
    query, value, key = _x(rng, 2, 4, 6), _x(rng, 2, 5, 3), _x(rng, 2, 5, 5)
    value_mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    context, alpha = layer(query, value, key, value_mask=value_mask, return_attention_scores=True)
    processed_key = layer.precompute_keys(key)
    np.testing.assert_allclose(processed_key, key @ layer.get_weights()[0], atol=1e-5)
    for t in range(4):
        context_t, alpha_t = layer(
            query[:, t],
            value,
            value_mask=value_mask,
            processed_key=processed_key,
            return_attention_scores=True,
        )
        assert context_t.shape == (2, 3) and alpha_t.shape == (2, 5)
        np.testing.assert_allclose(context_t, np.asarray(context)[:, t], atol=1e-6)
        np.testing.assert_allclose(alpha_t, np.asarray(alpha)[:, t], atol=1e-6)
        _, alpha_ref = _reference_for(layer, query[:, t : t + 1], value, key, value_mask)
        np.testing.assert_allclose(alpha_t, alpha_ref[:, 0], atol=1e-5)


@pytest.mark.parametrize("use_scale", [False, True])
def test_identity_kernel_equals_keras_dot_attention_with_masks(rng, use_scale):
    layer = LuongAttention(use_scale=use_scale)
    keras_attention = keras.layers.Attention(use_scale=use_scale, score_mode="dot")
    query, value, key = _x(rng, 2, 3, 4), _x(rng, 2, 5, 6), _x(rng, 2, 5, 4)
    query_mask = np.array([[1, 1, 0], [1, 1, 1]], bool)
    value_mask = np.array([[1, 1, 1, 1, 0], [1, 0, 1, 0, 0]], bool)
    layer(query, value, key)
    keras_attention([query, value, key])
    weights = [np.eye(4, dtype="float32")] + ([np.float32(1.7)] if use_scale else [])
    layer.set_weights(weights)
    keras_attention.set_weights(weights[1:])
    context, alpha = layer(
        query,
        value,
        key,
        query_mask=query_mask,
        value_mask=value_mask,
        return_attention_scores=True,
    )
    context_keras, alpha_keras = keras_attention(
        [query, value, key], mask=[query_mask, value_mask], return_attention_scores=True
    )
    np.testing.assert_allclose(context, context_keras, atol=1e-5)
    np.testing.assert_allclose(alpha, alpha_keras, atol=1e-5)


def test_weight_layout_and_units(rng):
    layer = LuongAttention(use_scale=True)
    layer(_x(rng, 2, 3, 6), _x(rng, 2, 4, 3), _x(rng, 2, 4, 5))
    assert [(w.name, tuple(w.shape)) for w in layer.weights] == [
        ("key_kernel", (5, 6)),
        ("scale", ()),
    ]
    assert [tuple(w.shape) for w in layer.get_weights()] == [(5, 6), ()]
    np.testing.assert_array_equal(layer.scale.numpy(), 1.0)
    plain = LuongAttention(units=6)
    plain(_x(rng, 2, 6), _x(rng, 2, 4, 3))
    assert [(w.name, tuple(w.shape)) for w in plain.weights] == [("key_kernel", (3, 6))]


def test_query_mask_zeroes_context_and_implicit_masks_are_honoured(rng):
    layer = _layer(rng, True, dq=3, dk=3)
    tokens_q = np.array([[1, 2, 3, 0], [4, 5, 0, 0]])
    tokens_v = np.array([[1, 2, 3, 4, 5], [6, 7, 0, 0, 0]])
    embedding = keras.layers.Embedding(10, 3, mask_zero=True)
    query, value = embedding(tokens_q), embedding(tokens_v)
    context, alpha = layer(query, value, return_attention_scores=True)
    explicit = layer(
        np.asarray(query), np.asarray(value), query_mask=tokens_q != 0, value_mask=tokens_v != 0
    )
    np.testing.assert_allclose(context, explicit, atol=1e-6)
    assert np.all(np.asarray(context)[tokens_q == 0] == 0.0)
    _, alpha_ref = _reference_for(
        layer, np.asarray(query), np.asarray(value), value_mask=tokens_v != 0
    )
    np.testing.assert_allclose(alpha, alpha_ref, atol=1e-5)
    np.testing.assert_array_equal(_masking.keras_mask(context), tokens_q != 0)


@pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
def test_fully_masked_keys_give_finite_zero_context(rng, policy):
    keras.mixed_precision.set_global_policy(policy)
    layer = LuongAttention(use_scale=True)
    value_mask = np.array([[1, 1, 0], [0, 0, 0]], bool)
    context, alpha = layer(
        _x(rng, 2, 2, 3) * 50, _x(rng, 2, 3, 3), value_mask=value_mask, return_attention_scores=True
    )
    assert (
        keras.backend.standardize_dtype(context.dtype)
        == keras.mixed_precision.global_policy().compute_dtype
    )
    context, alpha = (
        keras.ops.convert_to_numpy(keras.ops.cast(t, "float32")) for t in (context, alpha)
    )
    assert np.isfinite(context).all() and np.isfinite(alpha).all()
    np.testing.assert_array_equal(alpha[1], 0.0)
    np.testing.assert_array_equal(context[1], 0.0)
    np.testing.assert_allclose(alpha[0].sum(-1), 1.0, atol=1e-2)


def test_dropout_applies_only_in_training(rng):
    layer = LuongAttention(dropout=0.5, seed=1)
    query, value = _x(rng, 2, 3, 3), _x(rng, 2, 6, 3)
    inference = layer(query, value)
    _, alpha = layer(query, value, return_attention_scores=True)
    np.testing.assert_allclose(inference, np.einsum("bij,bjd->bid", alpha, value), atol=1e-6)
    np.testing.assert_allclose(layer(query, value, training=False), inference, atol=1e-6)
    trained = np.asarray(layer(query, value, training=True))
    assert not np.allclose(trained, inference)


def _argument_error(owner, error, argument, value):
    """The one wording of keras_seq._validation, as a regex."""
    kind = "value" if error is ValueError else "type"
    return (
        rf"^{owner}: invalid {kind} for argument `{argument}`: .*received {re.escape(repr(value))}"
    )


@pytest.mark.parametrize(
    "argument, value, error",
    [
        ("units", 0, ValueError),
        ("units", True, TypeError),
        ("use_scale", 1, TypeError),
        ("dropout", 1.0, ValueError),
        ("seed", 1.5, ValueError),
    ],
)
def test_bad_constructor_argument_error_names_layer_argument_and_value(argument, value, error):
    with pytest.raises(
        error, match=_argument_error("LuongAttention 'att'", error, argument, value)
    ):
        LuongAttention(name="att", **{argument: value})


def test_units_other_than_query_width_raise_at_build(rng):
    layer = LuongAttention(units=8, name="att")
    with pytest.raises(
        ValueError,
        match=r"^LuongAttention 'att': invalid shape for argument `query`: expected \(\.\.\., 8\): "
        r"the kernel maps keys to `units`=8 .*received shape \(2, 3, 6\)\.",
    ):
        layer(_x(rng, 2, 3, 6), _x(rng, 2, 4, 5))
    assert not layer.built


def test_bad_input_widths_raise_clear_errors(rng):
    layer = LuongAttention(name="att")
    layer(_x(rng, 2, 3, 6), _x(rng, 2, 4, 5))
    with pytest.raises(
        ValueError, match=r"'att': invalid shape for argument `query`: expected \(\.\.\., 6\)"
    ):
        layer(_x(rng, 2, 3, 7), _x(rng, 2, 4, 5))
    with pytest.raises(
        ValueError, match=r"'att': invalid shape for argument `key`: expected \(\.\.\., 5\)"
    ):
        layer(_x(rng, 2, 3, 6), _x(rng, 2, 4, 5), key=_x(rng, 2, 4, 4))
    with pytest.raises(
        ValueError,
        match=r"'att': invalid shape for argument `processed_key`: expected \(\.\.\., 6\)",
    ):
        layer(_x(rng, 2, 6), _x(rng, 2, 4, 5), processed_key=_x(rng, 2, 4, 5))
    with pytest.raises(ValueError, match=r"'att'.*`value`: expected the batch size of `query`"):
        layer(_x(rng, 2, 3, 6), _x(rng, 3, 4, 5))
    with pytest.raises(ValueError, match=r"'att': invalid shape for argument `value_mask`"):
        layer(_x(rng, 2, 3, 6), _x(rng, 2, 4, 5), value_mask=np.ones((2, 3), bool))
    with pytest.raises(ValueError, match="LuongAttention 'fresh': call the layer once"):
        LuongAttention(name="fresh").precompute_keys(_x(rng, 2, 4, 5))


