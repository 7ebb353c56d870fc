"""MultiHeadAttention: equality with keras.layers.MultiHeadAttention, cache, masking."""

import re

import keras
import numpy as np
import pytest

from keras_seq import layers
from keras_seq.layers.attention import _masking


def _pair(rng, query_shape, value_shape, key_shape=None, **kwargs):
    """Ours and Keras' layer, built on the same shapes, with Keras' weights copied."""
    reference = keras.layers.MultiHeadAttention(**kwargs)
    ours = layers.MultiHeadAttention(**kwargs)
    for layer in (reference, ours):
        layer.build(query_shape, value_shape, key_shape)
    reference.set_weights(
        [rng.normal(scale=0.5, size=w.shape).astype("float32") for w in reference.get_weights()]
    )
    ours.set_weights(reference.get_weights())
    return ours, reference


def _x(rng, *shape):
    return rng.normal(size=shape).astype("float32")


def test_weight_layout_equals_keras(rng):
    ours, reference = _pair(rng, (2, 5, 8), (2, 7, 6), num_heads=3, key_dim=4, value_dim=5)
    assert [v.path.split("/", 1)[1] for v in ours.weights] == [
        v.path.split("/", 1)[1] for v in reference.weights
    ]
    assert [w.shape for w in ours.get_weights()] == [w.shape for w in reference.get_weights()]


def test_self_attention_equals_keras_with_scores(rng):
    ours, reference = _pair(rng, (2, 5, 8), (2, 5, 8), num_heads=2, key_dim=4)
    x = _x(rng, 2, 5, 8)
    y, scores = ours(x, x, return_attention_scores=True)
    y_ref, scores_ref = reference(x, x, return_attention_scores=True)
    np.testing.assert_allclose(y, y_ref, atol=1e-5)
    np.testing.assert_allclose(scores, scores_ref, atol=1e-6)


def test_cross_attention_with_different_dims_equals_keras(rng):
    kwargs = dict(num_heads=3, key_dim=4, value_dim=5, output_shape=7, use_bias=True)
    ours, reference = _pair(rng, (2, 5, 8), (2, 6, 9), (2, 6, 10), **kwargs)
    q, v, k = _x(rng, 2, 5, 8), _x(rng, 2, 6, 9), _x(rng, 2, 6, 10)
    y, scores = ours(q, v, k, return_attention_scores=True)
    y_ref, scores_ref = reference(q, v, k, return_attention_scores=True)
    assert y.shape == (2, 5, 7) and scores.shape == (2, 3, 5, 6)
    np.testing.assert_allclose(y, y_ref, atol=1e-5)
    np.testing.assert_allclose(scores, scores_ref, atol=1e-6)


def test_causal_mask_over_an_extra_attention_axis_equals_keras(rng):
    # (B, T, A, d) attending over axis 1: each of the A columns is causal in T.
    kwargs = dict(num_heads=2, key_dim=4, attention_axes=1)
    ours, reference = _pair(rng, (2, 5, 3, 8), (2, 5, 3, 8), **kwargs)
    x = _x(rng, 2, 5, 3, 8)
    y, scores = ours(x, x, use_causal_mask=True, return_attention_scores=True)
    y_ref, scores_ref = reference(x, x, use_causal_mask=True, return_attention_scores=True)
    np.testing.assert_allclose(y, y_ref, atol=1e-5)
    np.testing.assert_allclose(scores, scores_ref, atol=1e-6)
    future = np.triu(np.ones((5, 5), bool), k=1)
    assert np.asarray(scores)[..., future].max() == 0.0


def test_causal_mask_over_two_attention_axes_follows_row_major_positions(rng):
    mha = layers.MultiHeadAttention(num_heads=1, key_dim=4, attention_axes=(1, 2))
    x = _x(rng, 1, 2, 3, 8)
    _, scores = mha(x, x, use_causal_mask=True, return_attention_scores=True)
    scores = np.asarray(scores).reshape(6, 6)  # (T1*T2, S1*S2), row-major
    np.testing.assert_array_equal(scores > 0, np.tril(np.ones((6, 6), bool)))


def test_compute_attention_takes_keras_arguments_and_ands_causal_mask(rng):
    mha = layers.MultiHeadAttention(num_heads=2, key_dim=4)
    mha.build((1, 5, 8), (1, 5, 8))
    q, k, v = (_x(rng, 1, 5, 2, 4) for _ in range(3))
    extra = np.ones((1, 5, 5), bool)
    extra[:, 3, 1] = False
    merged = extra & np.tril(np.ones((5, 5), bool))[None]
    both, _ = mha._compute_attention(q, k, v, extra, None, True, use_causal_mask=True)
    expected, _ = mha._compute_attention(q, k, v, merged, None, True)
    np.testing.assert_allclose(both, expected, atol=1e-6)


def test_subclass_overriding_compute_attention_keras_style_gets_the_causal_mask(rng):
    seen = {}

    class Sub(layers.MultiHeadAttention):
        def _compute_attention(
            self,
            query,
            key,
            value,
            attention_mask=None,
            training=None,
            return_attention_scores=False,
        ):
            seen["mask"] = attention_mask
            return super()._compute_attention(
                query, key, value, attention_mask, training, return_attention_scores
            )

    x = _x(rng, 2, 4, 8)
    Sub(num_heads=2, key_dim=4)(x, x, use_causal_mask=True)
    np.testing.assert_array_equal(np.asarray(seen["mask"])[0], np.tril(np.ones((4, 4), bool)))


def test_causal_mask_equals_keras(rng):
    ours, reference = _pair(rng, (2, 6, 8), (2, 6, 8), num_heads=2, key_dim=4)
    x = _x(rng, 2, 6, 8)
    y, scores = ours(x, x, use_causal_mask=True, return_attention_scores=True)
    y_ref, scores_ref = reference(x, x, use_causal_mask=True, return_attention_scores=True)
    np.testing.assert_allclose(y, y_ref, atol=1e-5)
    np.testing.assert_allclose(scores, scores_ref, atol=1e-6)
    assert np.all(np.asarray(scores)[:, :, np.triu_indices(6, 1)[0], np.triu_indices(6, 1)[1]] == 0)


def test_value_key_and_attention_masks_equal_keras(rng):
    ours, reference = _pair(rng, (2, 5, 8), (2, 6, 8), num_heads=2, key_dim=4)
    q, v = _x(rng, 2, 5, 8), _x(rng, 2, 6, 8)
    value_mask = np.array([[1] * 6, [1] * 3 + [0] * 3], bool)
    key_mask = np.array([[1] * 5 + [0], [1] * 6], bool)
    attention_mask = rng.random((2, 5, 6)) > 0.3
    kwargs = dict(value_mask=value_mask, key_mask=key_mask, attention_mask=attention_mask)
    y, scores = ours(q, v, v, return_attention_scores=True, **kwargs)
    y_ref, scores_ref = reference(q, v, v, return_attention_scores=True, **kwargs)
    np.testing.assert_allclose(y, y_ref, atol=1e-5)
    np.testing.assert_allclose(scores, scores_ref, atol=1e-6)


def test_explicit_query_mask_equals_keras_with_implicit_mask(rng):
    # Keras 3.15 only reads the query mask from the tensor; ours takes the argument.
    ours, reference = _pair(rng, (2, 5, 8), (2, 6, 8), num_heads=2, key_dim=4)
    q, v = _x(rng, 2, 5, 8), _x(rng, 2, 6, 8)
    query_mask = np.array([[1] * 5, [1] * 2 + [0] * 3], bool)
    y, scores = ours(q, v, query_mask=query_mask, return_attention_scores=True)
    masked_q = keras.ops.convert_to_tensor(q)
    _masking.set_keras_mask(masked_q, keras.ops.convert_to_tensor(query_mask))
    y_ref, scores_ref = reference(masked_q, v, return_attention_scores=True)
    np.testing.assert_allclose(scores, scores_ref, atol=1e-6)
    np.testing.assert_allclose(np.asarray(y)[query_mask], np.asarray(y_ref)[query_mask], atol=1e-5)
    # A masked query attends to nothing: its output is the output bias alone.
    # (Keras' fused path averages all values there instead; we keep it finite
    # and independent of padding.)
    np.testing.assert_allclose(
        np.asarray(y)[1, 2:], np.broadcast_to(ours.get_weights()[-1], (3, 8))
    )


def test_implicit_embedding_mask_is_honoured(rng):
    tokens = np.array([[3, 4, 5, 0, 0], [6, 7, 0, 0, 0]])
    keep = tokens != 0
    embedding = keras.layers.Embedding(10, 8, mask_zero=True)
    ours, reference = _pair(rng, (2, 5, 8), (2, 5, 8), num_heads=2, key_dim=4)
    x = embedding(tokens)
    y = ours(x, x)
    np.testing.assert_array_equal(_masking.keras_mask(y), keep)
    np.testing.assert_array_equal(_masking.keras_mask(x), keep)  # the caller's tensor keeps its mask
    y_ref = reference(x, x)
    np.testing.assert_allclose(np.asarray(y)[keep], np.asarray(y_ref)[keep], atol=1e-5)
    # The same result from explicit masks on an unmasked tensor.
    x_plain = np.asarray(embedding(tokens))
    y_explicit = ours(x_plain, x_plain, query_mask=keep, value_mask=keep)
    np.testing.assert_allclose(y, y_explicit, atol=1e-6)


def test_cached_decoding_equals_full_causal_at_every_position(rng):
    mha = layers.MultiHeadAttention(num_heads=2, key_dim=4)
    x = _x(rng, 3, 7, 8)
    y_full, scores_full = mha(x, x, use_causal_mask=True, return_attention_scores=True)
    cache = np.zeros((3, 2, 7, 2, 4), "float32")
    for i in range(7):
        y_i, scores_i, cache = mha(
            x[:, i : i + 1],
            x[:, i : i + 1],
            cache=cache,
            cache_update_index=i,
            use_causal_mask=True,
            return_attention_scores=True,
        )
        np.testing.assert_allclose(y_i, np.asarray(y_full)[:, i : i + 1], atol=1e-5)
        np.testing.assert_allclose(scores_i, np.asarray(scores_full)[:, :, i : i + 1], atol=1e-6)
    # The final cache holds every key/value projection.
    k = np.einsum("btd,dhk->bthk", x, mha.get_weights()[2]) + mha.get_weights()[3]
    np.testing.assert_allclose(np.asarray(cache)[:, 0], k, atol=1e-5)


def test_cached_prefix_then_steps_equals_full(rng):
    # A prompt of 3 tokens written at once, then single steps.
    mha = layers.MultiHeadAttention(num_heads=2, key_dim=3)
    x = _x(rng, 2, 6, 5)
    y_full = np.asarray(mha(x, x, use_causal_mask=True))
    cache = np.zeros((2, 2, 6, 2, 3), "float32")
    y0, cache = mha(x[:, :3], x[:, :3], cache=cache, cache_update_index=0, use_causal_mask=True)
    np.testing.assert_allclose(y0, y_full[:, :3], atol=1e-5)
    for i in range(3, 6):
        y_i, cache = mha(
            x[:, i : i + 1],
            x[:, i : i + 1],
            cache=cache,
            cache_update_index=i,
            use_causal_mask=True,
        )
        np.testing.assert_allclose(y_i, y_full[:, i : i + 1], atol=1e-5)


def test_static_cache_equals_cross_attention(rng):
    mha = layers.MultiHeadAttention(num_heads=2, key_dim=4)
    q, v = _x(rng, 2, 3, 8), _x(rng, 2, 5, 6)
    mask = np.array([[1] * 5, [1] * 2 + [0] * 3], bool)
    y = mha(q, v, value_mask=mask)
    w = mha.get_weights()
    k = np.einsum("bsd,dhk->bshk", v, w[2]) + w[3]
    vv = np.einsum("bsd,dhk->bshk", v, w[4]) + w[5]
    cache = np.stack([k, vv], axis=1)
    # With cache_update_index=None the value argument is not projected again.
    y_cached, same_cache = mha(q, np.zeros_like(v), cache=cache, value_mask=mask)
    np.testing.assert_allclose(y_cached, y, atol=1e-5)
    np.testing.assert_array_equal(same_cache, cache)


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_fully_masked_row_is_finite(rng, policy):
    keras.mixed_precision.set_global_policy(policy)
    mha = layers.MultiHeadAttention(num_heads=2, key_dim=4)
    q, v = _x(rng, 2, 3, 8) * 30, _x(rng, 2, 4, 8) * 30
    mask = np.array([[1] * 4, [0] * 4], bool)  # the second example has no key at all
    y, scores = mha(q, v, value_mask=mask, return_attention_scores=True)
    y, scores = (keras.ops.convert_to_numpy(keras.ops.cast(t, "float32")) for t in (y, scores))
    assert np.isfinite(y).all() and np.isfinite(scores).all()
    np.testing.assert_array_equal(scores[1], 0.0)
    tolerance = 1e-5 if policy == "float32" else 1e-2
    np.testing.assert_allclose(scores[0].sum(-1), 1.0, atol=tolerance)
    output_bias = np.asarray(mha.get_weights()[-1], "float32")
    np.testing.assert_allclose(y[1], np.broadcast_to(output_bias, (3, 8)), atol=tolerance)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_masked_softmax_runs_in_float32(rng, dtype):
    # Logits this far apart underflow/overflow a half-precision exp; the
    # float32 softmax rounded to `dtype` must come out.
    logits = rng.normal(scale=40.0, size=(4, 6)).astype("float32")
    mask = rng.random((4, 6)) > 0.3
    mask[:, 0] = True
    row_max = np.where(mask, logits, -np.inf).max(-1, keepdims=True)
    expected = np.where(mask, np.exp(logits - row_max), 0.0)
    expected /= expected.sum(-1, keepdims=True)
    weights = _masking.masked_softmax(keras.ops.cast(logits, dtype), mask)
    assert keras.backend.standardize_dtype(weights.dtype) == dtype
    np.testing.assert_allclose(np.asarray(keras.ops.cast(weights, "float32")), expected, atol=4e-3)
    assert _masking.large_negative("float16") > -65504.0


def _argument_error(owner, error, argument, value):
    """The one wording of keras_seq._validation, as a regex."""
    kind = "value" if error is ValueError else "type"
    return (
        rf"^{owner}: invalid {kind} for argument `{argument}`: .*received {re.escape(repr(value))}"
    )


@pytest.mark.parametrize(
    "argument, value, error",
    [
        ("num_heads", 0, ValueError),
        ("num_heads", 1.5, ValueError),
        ("num_heads", True, TypeError),
        ("num_heads", "2", TypeError),
        ("key_dim", -2, ValueError),
        ("key_dim", None, TypeError),
        ("value_dim", 0, ValueError),
        ("value_dim", np.bool_(True), TypeError),
        ("dropout", 1.0, ValueError),
        ("dropout", None, TypeError),
        ("use_bias", 1, TypeError),
        ("sliding_window", 0, ValueError),
    ],
)
def test_bad_constructor_argument_error_names_layer_argument_and_value(argument, value, error):
    kwargs = dict(num_heads=2, key_dim=4, name="m")
    kwargs[argument] = value
    with pytest.raises(
        error, match=_argument_error("MultiHeadAttention 'm'", error, argument, value)
    ):
        layers.MultiHeadAttention(**kwargs)


def test_bad_constructor_argument_error_contains_keras_wording():
    # Keras' own test matches "argument `num_heads`" with a ValueError.
    with pytest.raises(ValueError, match="argument `num_heads`"):
        layers.MultiHeadAttention(num_heads=1.5, key_dim=4)


def test_numpy_integer_arguments_are_accepted(rng):
    mha = layers.MultiHeadAttention(np.int64(2), np.int32(4), value_dim=np.int64(3))
    assert (mha.num_heads, mha.key_dim, mha.value_dim) == (2, 4, 3)
    assert type(mha.num_heads) is int
    assert mha(_x(rng, 2, 3, 8), _x(rng, 2, 4, 8)).shape == (2, 3, 8)


def test_bad_call_arguments_raise(rng):
    mha = layers.MultiHeadAttention(num_heads=2, key_dim=4, name="mha")
    mha(_x(rng, 2, 3, 8), _x(rng, 2, 4, 8))
    with pytest.raises(ValueError, match=r"'mha': invalid shape for argument `query`: .*8"):
        mha(_x(rng, 2, 3, 7), _x(rng, 2, 4, 8))
    with pytest.raises(ValueError, match=r"'mha': invalid shape for argument `value`: .*8"):
        mha(_x(rng, 2, 3, 8), _x(rng, 2, 4, 5))
    with pytest.raises(ValueError, match=r"'mha'.*`value`: expected the batch size of `query`"):
        mha(_x(rng, 2, 3, 8), _x(rng, 3, 4, 8))
    with pytest.raises(ValueError, match=r"'mha': invalid shape for argument `value_mask`"):
        mha(_x(rng, 2, 3, 8), _x(rng, 2, 4, 8), value_mask=np.ones((2, 5), bool))
    with pytest.raises(ValueError, match=r"'mha': invalid shape for argument `attention_mask`"):
        mha(_x(rng, 2, 3, 8), _x(rng, 2, 4, 8), attention_mask=np.ones((2, 4, 3), bool))
    with pytest.raises(ValueError, match=r"'mha': invalid shape for argument `cache`"):
        mha(
            _x(rng, 2, 1, 8),
            _x(rng, 2, 1, 8),
            cache=np.zeros((2, 2, 5, 2, 3)),
            cache_update_index=0,
        )
    with pytest.raises(ValueError, match="'mha'.*`cache_update_index` needs a `cache`"):
        mha(_x(rng, 2, 1, 8), _x(rng, 2, 1, 8), cache_update_index=0)
    uneven = layers.MultiHeadAttention(num_heads=2, key_dim=4, value_dim=3, name="uneven")
    with pytest.raises(ValueError, match="'uneven'.*value_dim == key_dim"):
        uneven(_x(rng, 2, 1, 8), _x(rng, 2, 1, 8), cache=np.zeros((2, 2, 5, 2, 4), "float32"))


@pytest.mark.slow
@pytest.mark.tensorflow_only  # TFLite export
def test_tflite_matches_keras_full_and_cached_step(rng):
    import tensorflow as tf

    from keras_seq.export import convert_to_tflite, run_tflite, tflite_op_names

    mha = layers.MultiHeadAttention(num_heads=2, key_dim=4)
    x_in = keras.Input((None, 8))
    model = keras.Model(x_in, mha(x_in, x_in, use_causal_mask=True))
    x = _x(rng, 2, 5, 8)
    flatbuffer = convert_to_tflite(model)
    assert not any(op.startswith("CUSTOM") for op in tflite_op_names(flatbuffer))
    np.testing.assert_allclose(run_tflite(flatbuffer, x)[0], model(x), atol=1e-5)

    def step(x_t, cache, index):
        return mha(x_t, x_t, cache=cache, cache_update_index=index, use_causal_mask=True)

    signature = [
        tf.TensorSpec((None, 1, 8)),
        tf.TensorSpec((None, 2, 5, 2, 4)),
        tf.TensorSpec((), tf.int32),
    ]
    flatbuffer = convert_to_tflite(step, signature)
    assert not any(op.startswith("CUSTOM") for op in tflite_op_names(flatbuffer))
    cache = np.zeros((2, 2, 5, 2, 4), "float32")
    for i in range(5):
        y_tflite, cache_tflite = run_tflite(flatbuffer, x[:, i : i + 1], cache, np.int32(i))
        y_keras, cache = step(x[:, i : i + 1], cache, i)
        np.testing.assert_allclose(y_tflite, y_keras, atol=1e-5)
        np.testing.assert_allclose(cache_tflite, cache, atol=1e-5)


@pytest.mark.tensorflow_only  # the ops of a TensorFlow graph, for ONNX and TF Serving
def test_cache_update_traces_to_core_ops_without_xla(rng):
    # XlaDynamicUpdateSlice has no ONNX mapping and needs XLA in TF Serving.
    import tensorflow as tf

    mha = layers.MultiHeadAttention(num_heads=2, key_dim=4)
    mha.build((None, None, 8), (None, None, 8))
    step = tf.function(
        lambda x_t, cache, index: mha(x_t, x_t, cache=cache, cache_update_index=index)
    ).get_concrete_function(
        tf.TensorSpec((None, None, 8)),
        tf.TensorSpec((None, 2, 6, 2, 4)),
        tf.TensorSpec((), tf.int32),
    )
    op_types = {op.type for op in step.graph.get_operations()}
    assert not any(t.startswith("Xla") for t in op_types), op_types
