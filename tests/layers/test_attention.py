"""BahdanauAttention against a NumPy reference written from the equations."""

import math
import re

import keras
import numpy as np
import pytest

from keras_seq import layers
from keras_seq.layers.attention import _masking


def _bahdanau_reference(weights, query, value, key=None, value_mask=None, normalize=False):
    """e_ij = vᵀ tanh(W_q q_i + W_k k_j [+ b]), α = softmax over unmasked j, c = α V."""
    key = value if key is None else key
    W_q, W_k, v = weights[:3]
    if normalize:
        b, g = weights[3], weights[4]
        v = g * v / np.linalg.norm(v)
    else:
        b = 0.0
    Tq, Tk = query.shape[1], value.shape[1]
    e = np.zeros((query.shape[0], Tq, Tk))
    for i in range(Tq):
        for j in range(Tk):
            e[:, i, j] = np.tanh(query[:, i] @ W_q + key[:, j] @ W_k + b) @ v
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


def _layer(rng, normalize, dq=6, dk=5, units=4):
    layer = layers.BahdanauAttention(units, normalize=normalize)
    layer.build((None, None, dq), (None, None, 3), (None, None, dk))
    # Random (not initial) weights, so gain and bias matter.
    layer.set_weights([rng.normal(size=w.shape).astype("float32") for w in layer.get_weights()])
    return layer


@pytest.mark.parametrize("normalize", [False, True])
def test_matches_numpy_reference_with_masks(rng, normalize):
    layer = _layer(rng, normalize)
    query, value, key = _x(rng, 2, 4, 6), _x(rng, 2, 5, 3), _x(rng, 2, 5, 5)
    value_mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 1, 0]], bool)
    context, alpha = layer(query, value, key, value_mask=value_mask, return_attention_scores=True)
    context_ref, alpha_ref = _bahdanau_reference(
        layer.get_weights(), query, value, key, value_mask, normalize
    )
    np.testing.assert_allclose(alpha, alpha_ref, atol=1e-5)
    np.testing.assert_allclose(context, context_ref, atol=1e-5)
    np.testing.assert_allclose(np.asarray(alpha).sum(-1), 1.0, atol=1e-6)
    assert np.all(np.asarray(alpha)[1][:, [2, 4]] == 0.0)


@pytest.mark.parametrize("normalize", [False, True])
def test_single_step_query_equals_sequence_query_at_that_step(rng, normalize):
    layer = _layer(rng, normalize)
    query, value, key = _x(rng, 2, 4, 6), _x(rng, 2, 5, 3), _x(rng, 2, 5, 5)
    context, alpha = layer(query, value, key, return_attention_scores=True)
    processed_key = layer.precompute_keys(key)
    for t in range(4):
        context_t, alpha_t = layer(
            query[:, t], value, processed_key=processed_key, return_attention_scores=True
        )
        assert context_t.shape == (2, 3) and alpha_t.shape == (2, 5)
        np.testing.assert_allclose(context_t, np.asarray(context)[:, t], atol=1e-6)
        np.testing.assert_allclose(alpha_t, np.asarray(alpha)[:, t], atol=1e-6)


def test_weight_layout_and_initial_normalizer(rng):
    layer = layers.BahdanauAttention(8, normalize=True)
    layer(_x(rng, 2, 3, 6), _x(rng, 2, 4, 5))
    assert [(w.name, tuple(w.shape)) for w in layer.weights] == [
        ("query_kernel", (6, 8)),
        ("key_kernel", (5, 8)),
        ("score_vector", (8,)),
        ("normalizer_bias", (8,)),
        ("normalizer_gain", ()),
    ]
    np.testing.assert_allclose(layer.normalizer_gain.numpy(), math.sqrt(1 / 8), rtol=1e-6)
    np.testing.assert_array_equal(layer.normalizer_bias.numpy(), 0.0)
    plain = layers.BahdanauAttention(8)
    plain(_x(rng, 2, 3, 6), _x(rng, 2, 4, 5))
    assert [w.name for w in plain.weights] == ["query_kernel", "key_kernel", "score_vector"]


def test_query_mask_zeroes_context_and_implicit_masks_are_honoured(rng):
    layer = _layer(rng, False, dq=3, dk=3)
    tokens_q = np.array([[1, 2, 3, 0], [4, 5, 0, 0]])
    tokens_v = np.array([[1, 2, 3, 4, 5], [6, 7, 0, 0, 0]])
    embedding = keras.layers.Embedding(10, 3, mask_zero=True)
    query, value = embedding(tokens_q), embedding(tokens_v)
    context = layer(query, value)
    explicit = layer(
        np.asarray(query),
        np.asarray(value),
        query_mask=tokens_q != 0,
        value_mask=tokens_v != 0,
    )
    np.testing.assert_allclose(context, explicit, atol=1e-6)
    assert np.all(np.asarray(context)[tokens_q == 0] == 0.0)
    _, alpha_ref = _bahdanau_reference(
        layer.get_weights(), np.asarray(query), np.asarray(value), value_mask=tokens_v != 0
    )
    _, alpha = layer(query, value, return_attention_scores=True)
    np.testing.assert_allclose(alpha, alpha_ref, atol=1e-5)
    np.testing.assert_array_equal(_masking.keras_mask(context), tokens_q != 0)
    # An explicit mask is combined with the implicit one, not substituted.
    extra = np.array([[1, 0, 1, 1, 1], [1, 1, 1, 1, 1]], bool)
    _, alpha_both = layer(query, value, value_mask=extra, return_attention_scores=True)
    _, alpha_ref = _bahdanau_reference(
        layer.get_weights(),
        np.asarray(query),
        np.asarray(value),
        value_mask=(tokens_v != 0) & extra,
    )
    np.testing.assert_allclose(alpha_both, alpha_ref, atol=1e-5)


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_fully_masked_keys_give_finite_zero_context(rng, policy):
    keras.mixed_precision.set_global_policy(policy)
    layer = layers.BahdanauAttention(4, normalize=True)
    value_mask = np.array([[1, 1, 0], [0, 0, 0]], bool)
    context, alpha = layer(
        _x(rng, 2, 2, 3) * 50, _x(rng, 2, 3, 3), value_mask=value_mask, return_attention_scores=True
    )
    context, alpha = (keras.ops.convert_to_numpy(keras.ops.cast(t, "float32"))
                      for t in (context, alpha))
    assert np.isfinite(context).all() and np.isfinite(alpha).all()
    np.testing.assert_array_equal(alpha[1], 0.0)
    np.testing.assert_array_equal(context[1], 0.0)
    np.testing.assert_allclose(alpha[0].sum(-1), 1.0, atol=1e-2)


def test_dropout_applies_only_in_training(rng):
    layer = layers.BahdanauAttention(4, dropout=0.5, seed=1)
    query, value = _x(rng, 2, 3, 3), _x(rng, 2, 6, 3)
    inference = layer(query, value)
    _, alpha = layer(query, value, return_attention_scores=True)
    np.testing.assert_allclose(inference, np.einsum("bij,bjd->bid", alpha, value), atol=1e-6)
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
        ("units", 2.5, ValueError),
        ("units", True, TypeError),
        ("units", "4", TypeError),
        ("dropout", 1.5, ValueError),
        ("dropout", "0.1", TypeError),
        ("normalize", 1, TypeError),
        ("seed", 1.5, ValueError),
    ],
)
def test_bad_constructor_argument_error_names_layer_argument_and_value(argument, value, error):
    kwargs = dict(units=4, name="att")
    kwargs[argument] = value
    with pytest.raises(
        error, match=_argument_error("BahdanauAttention 'att'", error, argument, value)
    ):
        layers.BahdanauAttention(**kwargs)


def test_numpy_integer_arguments_are_accepted(rng):
    layer = layers.BahdanauAttention(np.int64(4), seed=np.int32(3))
    assert (layer.units, layer.seed) == (4, 3) and type(layer.units) is int
    assert layer(_x(rng, 2, 3, 6), _x(rng, 2, 4, 5)).shape == (2, 3, 5)


def test_bad_input_raises_clear_errors(rng):
    layer = layers.BahdanauAttention(4, name="att")
    layer(_x(rng, 2, 3, 6), _x(rng, 2, 4, 5))
    with pytest.raises(ValueError, match=r"'att': invalid shape for argument `query`: .*6"):
        layer(_x(rng, 2, 3, 7), _x(rng, 2, 4, 5))
    with pytest.raises(ValueError, match=r"'att'.*`value`: expected the batch size of `query`"):
        layer(_x(rng, 2, 3, 6), _x(rng, 3, 4, 5))
    with pytest.raises(ValueError, match=r"'att': invalid shape for argument `value_mask`"):
        layer(_x(rng, 2, 3, 6), _x(rng, 2, 4, 5), value_mask=np.ones((2, 3), bool))
    with pytest.raises(ValueError, match=r"'att': invalid shape for argument `processed_key`: .*4"):
        layer(_x(rng, 2, 6), _x(rng, 2, 4, 5), processed_key=_x(rng, 2, 4, 5))
    with pytest.raises(ValueError, match="call the layer once"):
        layers.BahdanauAttention(4).precompute_keys(_x(rng, 2, 4, 5))


def test_key_and_value_of_different_lengths_raise_value_error_before_computing(rng):
    layer = layers.BahdanauAttention(4, name="att")
    with pytest.raises(
        ValueError,
        match=r"BahdanauAttention 'att': invalid shape for argument `key`: expected the "
        r"length of `value`, Tk=4, received shape \(2, 3, 5\)\.",
    ):
        layer(_x(rng, 2, 3, 6), _x(rng, 2, 4, 5), key=_x(rng, 2, 3, 5))
    layer(_x(rng, 2, 3, 6), _x(rng, 2, 4, 5))
    with pytest.raises(ValueError, match=r"'att': invalid shape for argument `processed_key`"):
        layer(_x(rng, 2, 6), _x(rng, 2, 4, 5), processed_key=_x(rng, 2, 7, 4))


@pytest.mark.slow
@pytest.mark.tensorflow_only  # TFLite export
def test_tflite_matches_keras(rng):
    from keras_seq.export import convert_to_tflite, run_tflite, tflite_op_names

    query_in, value_in = keras.Input((None, 6)), keras.Input((None, 5))
    outputs = layers.BahdanauAttention(4, normalize=True)(
        query_in, value_in, return_attention_scores=True
    )
    model = keras.Model([query_in, value_in], list(outputs))
    query, value = _x(rng, 2, 3, 6), _x(rng, 2, 4, 5)
    flatbuffer = convert_to_tflite(model)
    assert not any(op.startswith("CUSTOM") for op in tflite_op_names(flatbuffer))
    got = sorted(run_tflite(flatbuffer, query, value), key=lambda a: a.shape[-1])
    want = sorted([np.asarray(t) for t in model([query, value])], key=lambda a: a.shape[-1])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-5)
