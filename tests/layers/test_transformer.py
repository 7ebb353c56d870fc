"""Transformer blocks and the feed-forward network against NumPy references."""

import re

import keras
import numpy as np
import pytest

from keras_seq import layers
from keras_seq.layers.attention import _masking

# ---------------------------------------------------------------- references


def _softmax(s, keep):
    s = np.where(keep, s, -np.inf)
    row_max = np.max(s, axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    e = np.where(keep, np.exp(s - row_max), 0.0)
    total = e.sum(-1, keepdims=True)
    return e / np.where(total > 0, total, 1.0)


def _mha(x_q, x_kv, w, keep=None):
    """Eq. 1 of Vaswani et al. with the 8 arrays of keras.layers.MultiHeadAttention."""
    W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o = w
    q = np.einsum("btd,dhk->bthk", x_q, W_q) + b_q
    k = np.einsum("bsd,dhk->bshk", x_kv, W_k) + b_k
    v = np.einsum("bsd,dhk->bshk", x_kv, W_v) + b_v
    s = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(q.shape[-1])
    keep = np.ones(s.shape, bool) if keep is None else np.broadcast_to(keep[:, None], s.shape)
    att = _softmax(s, keep)
    heads = np.einsum("bhts,bshk->bthk", att, v)
    return np.einsum("bthk,hkd->btd", heads, W_o) + b_o


def _layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _ffn(x, W_1, b_1, W_2, b_2):
    return np.maximum(x @ W_1 + b_1, 0.0) @ W_2 + b_2


def _sublayer(x, f, norm, normalize_first):
    """Post-norm LN(x + f(x)) or pre-norm x + f(LN(x))."""
    return x + f(norm(x)) if normalize_first else norm(x + f(x))


def _encoder(x, w, keep, normalize_first):
    attn, ln1, ln2, ffn = w[0:8], w[8:10], w[10:12], w[12:16]
    x = _sublayer(
        x, lambda h: _mha(h, h, attn, keep), lambda h: _layer_norm(h, *ln1), normalize_first
    )
    return _sublayer(x, lambda h: _ffn(h, *ffn), lambda h: _layer_norm(h, *ln2), normalize_first)


def _decoder(x, e, w, self_keep, cross_keep, normalize_first):
    self_attn, ln1 = w[0:8], w[8:10]
    x = _sublayer(
        x,
        lambda h: _mha(h, h, self_attn, self_keep),
        lambda h: _layer_norm(h, *ln1),
        normalize_first,
    )
    rest = w[10:]
    if e is not None:
        cross_attn, ln2, rest = w[10:18], w[18:20], w[20:]
        x = _sublayer(
            x,
            lambda h: _mha(h, e, cross_attn, cross_keep),
            lambda h: _layer_norm(h, *ln2),
            normalize_first,
        )
    ffn, ln3 = rest[0:4], rest[4:6]
    return _sublayer(x, lambda h: _ffn(h, *ffn), lambda h: _layer_norm(h, *ln3), normalize_first)


def _causal(T):
    return np.tril(np.ones((T, T), bool))[None]


def _randomize(layer, rng):
    layer.set_weights(
        [rng.normal(scale=0.4, size=w.shape).astype("float32") for w in layer.get_weights()]
    )
    return layer


def _x(rng, *shape):
    return rng.normal(size=shape).astype("float32")


# ---------------------------------------------------------------- feed-forward


def test_feed_forward_matches_numpy_and_keeps_width(rng):
    ffn = layers.PositionwiseFeedForward(16, activation="gelu")
    x = _x(rng, 2, 5, 6)
    y = ffn(x)
    W_1, b_1, W_2, b_2 = ffn.get_weights()
    h = x @ W_1 + b_1
    gelu = 0.5 * h * (1 + np.vectorize(__import__("math").erf)(h / np.sqrt(2)))
    np.testing.assert_allclose(y, gelu @ W_2 + b_2, atol=1e-5)
    assert [tuple(w.shape) for w in ffn.weights] == [(6, 16), (16,), (16, 6), (6,)]


@pytest.mark.slow
@pytest.mark.tensorflow_only  # TFLite export
def test_feed_forward_tflite_matches_keras(rng):
    from keras_seq.export import convert_to_tflite, run_tflite, tflite_op_names

    inputs = keras.Input((None, 6))
    model = keras.Model(inputs, layers.PositionwiseFeedForward(16)(inputs))
    flatbuffer = convert_to_tflite(model)
    assert not any(op.startswith("CUSTOM") for op in tflite_op_names(flatbuffer))
    x = _x(rng, 2, 5, 6)
    np.testing.assert_allclose(run_tflite(flatbuffer, x)[0], model(x), atol=1e-5)


# ---------------------------------------------------------------- encoder


@pytest.mark.parametrize("normalize_first", [False, True])
def test_encoder_matches_numpy_reference_with_merged_masks(rng, normalize_first):
    encoder = layers.TransformerEncoder(12, 2, dropout=0.2, normalize_first=normalize_first)
    x = _x(rng, 2, 6, 8)
    encoder(x)
    _randomize(encoder, rng)
    padding_mask = np.array([[1] * 6, [1] * 4 + [0] * 2], bool)
    attention_mask = rng.random((2, 6, 6)) > 0.3
    attention_mask[:, :, 0] = True
    y = encoder(x, padding_mask=padding_mask, attention_mask=attention_mask)
    keep = padding_mask[:, None, :] & attention_mask
    expected = _encoder(x, encoder.get_weights(), keep, normalize_first)
    np.testing.assert_allclose(y, expected, atol=1e-4)


def test_encoder_weight_order_is_kerashubs(rng):
    encoder = layers.TransformerEncoder(12, 2)
    encoder(_x(rng, 1, 3, 8))
    names = [v.path.split("/", 1)[1] for v in encoder.weights]
    attention = [
        f"self_attention_layer/{p}/{w}"
        for p in ("query", "key", "value", "attention_output")
        for w in ("kernel", "bias")
    ]
    assert names == attention + [
        "self_attention_layer_norm/gamma",
        "self_attention_layer_norm/beta",
        "feedforward_layer_norm/gamma",
        "feedforward_layer_norm/beta",
        "feedforward/intermediate_dense/kernel",
        "feedforward/intermediate_dense/bias",
        "feedforward/output_dense/kernel",
        "feedforward/output_dense/bias",
    ]
    assert [w.shape for w in encoder.get_weights()][-4:] == [(8, 12), (12,), (12, 8), (8,)]


def test_encoder_padding_invariance(rng):
    encoder = layers.TransformerEncoder(12, 2)
    x = _x(rng, 2, 5, 8)
    padding_mask = np.array([[1] * 5, [1] * 3 + [0] * 2], bool)
    y = np.asarray(encoder(x, padding_mask=padding_mask))
    x_long = np.concatenate([x, _x(rng, 2, 4, 8)], axis=1)
    mask_long = np.concatenate([padding_mask, np.zeros((2, 4), bool)], axis=1)
    y_long = np.asarray(encoder(x_long, padding_mask=mask_long))
    np.testing.assert_allclose(y_long[:, :5][padding_mask], y[padding_mask], atol=1e-5)


def test_encoder_implicit_mask_equals_explicit_padding_mask(rng):
    tokens = np.array([[1, 2, 3, 4], [5, 6, 0, 0]])
    keep = tokens != 0
    embedding = keras.layers.Embedding(10, 8, mask_zero=True)
    encoder = layers.TransformerEncoder(12, 2, normalize_first=True)
    x = embedding(tokens)
    y = encoder(x)
    np.testing.assert_array_equal(_masking.keras_mask(y), keep)
    y_explicit = encoder(np.asarray(x), padding_mask=keep)
    np.testing.assert_allclose(np.asarray(y)[keep], np.asarray(y_explicit)[keep], atol=1e-5)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_fully_padded_sequence_is_finite_under_mixed_precision(rng, policy):
    keras.mixed_precision.set_global_policy(policy)
    encoder = layers.TransformerEncoder(12, 2)
    decoder = layers.TransformerDecoder(12, 2)
    x = _x(rng, 2, 4, 8) * 20
    none = np.zeros((2, 4), bool)
    y = encoder(x, padding_mask=none)
    z = decoder(x, y, decoder_padding_mask=none, encoder_padding_mask=none)
    assert np.isfinite(keras.ops.convert_to_numpy(keras.ops.cast(z, "float32"))).all()


# ---------------------------------------------------------------- decoder


@pytest.mark.parametrize("normalize_first", [False, True])
def test_decoder_matches_numpy_reference_with_cross_attention(rng, normalize_first):
    decoder = layers.TransformerDecoder(12, 2, normalize_first=normalize_first)
    x, e = _x(rng, 2, 5, 8), _x(rng, 2, 6, 10)  # encoder width differs
    decoder(x, e)
    _randomize(decoder, rng)
    decoder_padding_mask = np.array([[1] * 5, [1] * 3 + [0] * 2], bool)
    encoder_padding_mask = np.array([[1] * 6, [1] * 2 + [0] * 4], bool)
    y = decoder(
        x,
        e,
        decoder_padding_mask=decoder_padding_mask,
        encoder_padding_mask=encoder_padding_mask,
    )
    self_keep = decoder_padding_mask[:, None, :] & _causal(5)
    cross_keep = np.broadcast_to(encoder_padding_mask[:, None, :], (2, 5, 6))
    expected = _decoder(x, e, decoder.get_weights(), self_keep, cross_keep, normalize_first)
    np.testing.assert_allclose(y, expected, atol=1e-4)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_decoder_returns_cross_attention_scores_of_numpy_reference(rng, normalize_first):
    decoder = layers.TransformerDecoder(12, 2, normalize_first=normalize_first)
    x, e = _x(rng, 2, 5, 8), _x(rng, 2, 6, 10)
    decoder(x, e)
    _randomize(decoder, rng)
    encoder_padding_mask = np.array([[1] * 6, [1] * 2 + [0] * 4], bool)
    y, scores = decoder(
        x, e, encoder_padding_mask=encoder_padding_mask, return_attention_scores=True
    )
    w = decoder.get_weights()
    # The cross-attention query is the self-attention sub-layer's output
    # (normalised first in pre-norm blocks).
    h = _sublayer(
        x,
        lambda h: _mha(h, h, w[0:8], _causal(5)),
        lambda h: _layer_norm(h, *w[8:10]),
        normalize_first,
    )
    if normalize_first:
        h = _layer_norm(h, *w[18:20])
    W_q, b_q, W_k, b_k = w[10:14]
    q = np.einsum("btd,dhk->bthk", h, W_q) + b_q
    k = np.einsum("bsd,dhk->bshk", e, W_k) + b_k
    logits = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(q.shape[-1])
    keep = np.broadcast_to(encoder_padding_mask[:, None, None, :], logits.shape)
    np.testing.assert_allclose(scores, _softmax(logits, keep), atol=1e-5)
    np.testing.assert_allclose(
        y, decoder(x, e, encoder_padding_mask=encoder_padding_mask), atol=1e-6
    )

    decoder_only = layers.TransformerDecoder(12, 2)
    with pytest.raises(ValueError, match="return_attention_scores"):
        decoder_only(x, return_attention_scores=True)


@pytest.mark.parametrize("use_causal_mask", [True, False])
def test_decoder_only_matches_numpy_reference(rng, use_causal_mask):
    decoder = layers.TransformerDecoder(12, 2)
    x = _x(rng, 2, 5, 8)
    decoder(x)
    _randomize(decoder, rng)
    y = decoder(x, use_causal_mask=use_causal_mask)
    keep = _causal(5) if use_causal_mask else None
    np.testing.assert_allclose(
        y, _decoder(x, None, decoder.get_weights(), keep, None, False), atol=1e-4
    )


def test_decoder_weight_order_is_kerashubs(rng):
    def attention(name):
        return [
            f"{name}/{p}/{w}"
            for p in ("query", "key", "value", "attention_output")
            for w in ("kernel", "bias")
        ]

    feed_forward = [
        "feedforward/intermediate_dense/kernel",
        "feedforward/intermediate_dense/bias",
        "feedforward/output_dense/kernel",
        "feedforward/output_dense/bias",
        "feedforward_layer_norm/gamma",
        "feedforward_layer_norm/beta",
    ]
    self_block = attention("self_attention") + [
        "self_attention_layer_norm/gamma",
        "self_attention_layer_norm/beta",
    ]
    cross_block = attention("cross_attention") + [
        "cross_attention_layer_norm/gamma",
        "cross_attention_layer_norm/beta",
    ]
    decoder = layers.TransformerDecoder(12, 2)
    decoder(_x(rng, 1, 3, 8), _x(rng, 1, 4, 6))
    assert [
        v.path.split("/", 1)[1] for v in decoder.weights
    ] == self_block + cross_block + feed_forward
    assert decoder.get_weights()[10].shape == (8, 2, 4)  # cross query kernel
    assert decoder.get_weights()[12].shape == (6, 2, 4)  # cross key kernel on the encoder width
    decoder_only = layers.TransformerDecoder(12, 2)
    decoder_only(_x(rng, 1, 3, 8))
    assert [v.path.split("/", 1)[1] for v in decoder_only.weights] == self_block + feed_forward


@pytest.mark.parametrize("normalize_first", [False, True])
def test_cached_decoding_equals_full_causal_at_every_position(rng, normalize_first):
    decoder = layers.TransformerDecoder(12, 2, normalize_first=normalize_first)
    T = 6
    x, e = _x(rng, 2, T, 8), _x(rng, 2, 4, 10)
    encoder_padding_mask = np.array([[1] * 4, [1] * 3 + [0]], bool)
    full = np.asarray(decoder(x, e, encoder_padding_mask=encoder_padding_mask))
    self_cache = np.zeros((2, 2, T, 2, 4), "float32")
    cross_cache = None
    for i in range(T):
        y_i, self_cache, cross_cache = decoder(
            x[:, i : i + 1],
            e,
            encoder_padding_mask=encoder_padding_mask,
            self_attention_cache=self_cache,
            self_attention_cache_update_index=i,
            cross_attention_cache=cross_cache,
        )
        np.testing.assert_allclose(y_i, full[:, i : i + 1], atol=1e-5)
    assert cross_cache.shape == (2, 2, 4, 2, 4)


def test_cached_decoder_only_equals_full_with_cache_padding_mask(rng):
    decoder = layers.TransformerDecoder(12, 2)
    T = 5
    x = _x(rng, 2, T, 8)
    padding_mask = np.array([[1] * 5, [0, 1, 1, 1, 1]], bool)  # left padding
    full = np.asarray(decoder(x, decoder_padding_mask=padding_mask))
    cache = np.zeros((2, 2, T, 2, 4), "float32")
    for i in range(T):
        y_i, cache = decoder(
            x[:, i : i + 1],
            decoder_padding_mask=padding_mask,
            self_attention_cache=cache,
            self_attention_cache_update_index=i,
        )
        np.testing.assert_allclose(
            np.asarray(y_i)[:, 0][padding_mask[:, i]], full[:, i][padding_mask[:, i]], atol=1e-5
        )


def test_cached_step_and_scores_build_in_functional_models(rng):
    decoder = layers.TransformerDecoder(12, 2)
    x_t, e = keras.Input((1, 8)), keras.Input((None, 6))
    self_cache, cross_cache = keras.Input((2, 5, 2, 4)), keras.Input((2, None, 2, 4))
    index = 3
    outputs = decoder(
        x_t,
        e,
        self_attention_cache=self_cache,
        self_attention_cache_update_index=index,
        cross_attention_cache=cross_cache,
        cross_attention_cache_update_index=0,
    )
    step = keras.Model([x_t, e, self_cache, cross_cache], list(outputs))
    inputs = [_x(rng, 2, 1, 8), _x(rng, 2, 4, 6), _x(rng, 2, 2, 5, 2, 4), _x(rng, 2, 2, 4, 2, 4)]
    eager = decoder(
        inputs[0],
        inputs[1],
        self_attention_cache=inputs[2],
        self_attention_cache_update_index=index,
        cross_attention_cache=inputs[3],
        cross_attention_cache_update_index=0,
    )
    for got, want in zip(step(inputs), eager):
        np.testing.assert_allclose(got, want, atol=1e-6)

    encoder = layers.TransformerEncoder(12, 2)
    source = keras.Input((None, 8))
    y, scores = encoder(source, return_attention_scores=True)
    assert scores.shape == (None, 2, None, None)
    x = _x(rng, 2, 5, 8)
    _, scores_value = keras.Model(source, [y, scores])(x)
    np.testing.assert_allclose(np.asarray(scores_value).sum(-1), 1.0, atol=1e-5)


def test_decoder_padding_invariance(rng):
    decoder = layers.TransformerDecoder(12, 2)
    x, e = _x(rng, 2, 4, 8), _x(rng, 2, 3, 6)
    encoder_mask = np.array([[1, 1, 1], [1, 0, 0]], bool)
    y = np.asarray(decoder(x, e, encoder_padding_mask=encoder_mask))
    x_long = np.concatenate([x, _x(rng, 2, 3, 8)], axis=1)
    e_long = np.concatenate([e, _x(rng, 2, 2, 6)], axis=1)
    encoder_mask_long = np.concatenate([encoder_mask, np.zeros((2, 2), bool)], axis=1)
    decoder_mask_long = np.arange(7)[None].repeat(2, 0) < 4
    y_long = np.asarray(
        decoder(
            x_long,
            e_long,
            decoder_padding_mask=decoder_mask_long,
            encoder_padding_mask=encoder_mask_long,
        )
    )
    np.testing.assert_allclose(y_long[:, :4], y, atol=1e-5)


# ---------------------------------------------------------------- errors


def _argument_error(owner, error, argument, value):
    """The one wording of keras_seq._validation, as a regex."""
    kind = "value" if error is ValueError else "type"
    return (
        rf"^{owner}: invalid {kind} for argument `{argument}`: .*received {re.escape(repr(value))}"
    )


_BLOCK_BAD_ARGUMENTS = [
    ("intermediate_dim", 0, ValueError),
    ("intermediate_dim", 8.5, ValueError),
    ("intermediate_dim", "8", TypeError),
    ("num_heads", -1, ValueError),
    ("num_heads", True, TypeError),
    ("dropout", 1.0, ValueError),
    ("dropout", None, TypeError),
    ("activation", "nope", ValueError),
    ("activation", 3, TypeError),
    ("layer_norm_epsilon", 0.0, ValueError),
    ("layer_norm_epsilon", "1e-5", TypeError),
    ("normalize_first", 1, TypeError),
]


@pytest.mark.parametrize("cls", ["TransformerEncoder", "TransformerDecoder"])
@pytest.mark.parametrize("argument, value, error", _BLOCK_BAD_ARGUMENTS)
def test_bad_block_argument_error_names_layer_argument_and_value(cls, argument, value, error):
    kwargs = dict(intermediate_dim=8, num_heads=2, name="blk")
    kwargs[argument] = value
    with pytest.raises(error, match=_argument_error(f"{cls} 'blk'", error, argument, value)):
        getattr(layers, cls)(**kwargs)


@pytest.mark.parametrize(
    "argument, value, error",
    [
        ("intermediate_dim", 0, ValueError),
        ("intermediate_dim", False, TypeError),
        ("activation", "nope", ValueError),
        ("activation", 3, TypeError),
        ("dropout", -0.5, ValueError),
        ("dropout", "0", TypeError),
    ],
)
def test_bad_feedforward_argument_error_names_layer_argument_and_value(argument, value, error):
    kwargs = dict(intermediate_dim=8, name="ffn")
    kwargs[argument] = value
    owner = "PositionwiseFeedForward 'ffn'"
    with pytest.raises(error, match=_argument_error(owner, error, argument, value)):
        layers.PositionwiseFeedForward(**kwargs)


def test_numpy_integer_arguments_are_accepted(rng):
    encoder = layers.TransformerEncoder(np.int64(8), 2)
    decoder = layers.TransformerDecoder(np.int32(8), np.int64(2))
    ffn = layers.PositionwiseFeedForward(np.int64(16))
    assert type(encoder.intermediate_dim) is int and type(decoder.num_heads) is int
    x = _x(rng, 2, 3, 8)
    assert encoder(x).shape == decoder(x).shape == ffn(x).shape == (2, 3, 8)
    assert encoder.get_config()["intermediate_dim"] == 8


def test_bad_arguments_raise_clear_errors(rng):
    with pytest.raises(
        ValueError, match=r"'enc': invalid value for argument `num_heads`: .*width.*8, received 3"
    ):
        layers.TransformerEncoder(8, 3, name="enc")(_x(rng, 1, 2, 8))
    encoder = layers.TransformerEncoder(8, 2, name="enc")
    with pytest.raises(ValueError, match=r"'enc': invalid shape for argument `padding_mask`"):
        encoder(_x(rng, 2, 3, 8), padding_mask=np.ones((2, 4), bool))
    with pytest.raises(ValueError, match=r"'enc': invalid shape for argument `inputs`: .*8"):
        encoder(_x(rng, 2, 3, 6))
    with pytest.raises(ValueError, match=r"'enc': invalid shape for argument `attention_mask`"):
        encoder(_x(rng, 2, 3, 8), attention_mask=np.ones((2, 3, 5), bool))
    decoder = layers.TransformerDecoder(8, 2, name="dec")
    decoder(_x(rng, 2, 3, 8), _x(rng, 2, 4, 6))
    with pytest.raises(ValueError, match="'dec'.*built with cross-attention"):
        decoder(_x(rng, 2, 3, 8))
    with pytest.raises(ValueError, match=r"'dec': invalid shape for argument `encoder_sequence`"):
        decoder(_x(rng, 2, 3, 8), _x(rng, 2, 4, 7))
    with pytest.raises(ValueError, match=r"'dec'.*`encoder_sequence`: expected the batch size"):
        decoder(_x(rng, 2, 3, 8), _x(rng, 3, 4, 6))
    with pytest.raises(ValueError, match=r"'dec'.*argument `decoder_padding_mask`"):
        decoder(
            _x(rng, 2, 1, 8),
            _x(rng, 2, 4, 6),
            decoder_padding_mask=np.ones((2, 1), bool),
            self_attention_cache=np.zeros((2, 2, 5, 2, 4), "float32"),
            self_attention_cache_update_index=0,
        )


_RANK_ERROR = (
    r"{}: invalid shape for argument `{}`: expected rank 3 \(batch, time, features\), "
    r"received shape {}\."
)


@pytest.mark.parametrize("shape", [(2, 8), (2, 3, 4, 8)])
def test_input_of_rank_other_than_3_raises_before_building(rng, shape):
    shape_text = re.escape(str(shape))
    encoder = layers.TransformerEncoder(8, 2, name="enc")
    with pytest.raises(ValueError, match=_RANK_ERROR.format("TransformerEncoder 'enc'", "inputs",
                                                            shape_text)):
        encoder(_x(rng, *shape))
    assert not encoder.built
    decoder = layers.TransformerDecoder(8, 2, name="dec")
    with pytest.raises(ValueError, match=_RANK_ERROR.format(
        "TransformerDecoder 'dec'", "decoder_sequence", shape_text
    )):
        decoder(_x(rng, *shape))
    with pytest.raises(ValueError, match=_RANK_ERROR.format(
        "TransformerDecoder 'dec'", "encoder_sequence", shape_text
    )):
        decoder(_x(rng, 2, 3, 8), _x(rng, *shape))
    assert not decoder.built
    # Symbolic inputs of a functional model, and a call after building.
    with pytest.raises(ValueError, match=r"'enc2': .*`inputs`: expected rank 3.*\(None, 8\)"):
        layers.TransformerEncoder(8, 2, name="enc2")(keras.Input((8,)))
    encoder(_x(rng, 2, 3, 8))
    with pytest.raises(ValueError, match=_RANK_ERROR.format("TransformerEncoder 'enc'", "inputs",
                                                            shape_text)):
        encoder(_x(rng, *shape))


def _integers(rng, *shape):
    return rng.integers(-3, 4, size=shape).astype("int32")


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_inputs_match_numpy_reference_of_their_float_values(rng, dtype):
    """As keras.layers.MultiHeadAttention: integer inputs are read as float32."""
    x, e = _integers(rng, 2, 5, 8).astype(dtype), _integers(rng, 2, 6, 10).astype(dtype)
    padding_mask = np.array([[1] * 5, [1] * 3 + [0] * 2], bool)
    encoder = _randomize(_built(layers.TransformerEncoder(12, 2), x), rng)
    y = encoder(x, padding_mask=padding_mask)
    assert keras.backend.standardize_dtype(y.dtype) == "float32"
    expected = _encoder(x.astype("float64"), encoder.get_weights(), padding_mask[:, None], False)
    np.testing.assert_allclose(y, expected, atol=1e-4)

    decoder = _randomize(_built(layers.TransformerDecoder(12, 2), x, e), rng)
    z = decoder(x, e, decoder_padding_mask=padding_mask)
    assert keras.backend.standardize_dtype(z.dtype) == "float32"
    self_keep = padding_mask[:, None, :] & _causal(5)
    expected = _decoder(
        x.astype("float64"), e.astype("float64"), decoder.get_weights(), self_keep, None, False
    )
    np.testing.assert_allclose(z, expected, atol=1e-4)


def _built(layer, *inputs):
    layer(*(a.astype("float32") for a in inputs))
    return layer


def test_integer_inputs_in_a_functional_model_and_under_mixed_precision(rng):
    x = _integers(rng, 2, 5, 8)
    e = _integers(rng, 2, 6, 8)
    keras.mixed_precision.set_global_policy("mixed_float16")
    tokens, memory = keras.Input((None, 8), dtype="int32"), keras.Input((None, 8), dtype="int32")
    encoder, decoder = layers.TransformerEncoder(12, 2), layers.TransformerDecoder(12, 2)
    model = keras.Model([tokens, memory], decoder(tokens, encoder(memory)))
    assert model.outputs[0].dtype == "float16"
    for layer in (encoder, decoder):
        _randomize(layer, rng)
    y = model([x, e])
    assert keras.backend.standardize_dtype(y.dtype) == "float16"
    w_enc, w_dec = encoder.get_weights(), decoder.get_weights()
    expected = _decoder(
        x.astype("float64"), _encoder(e.astype("float64"), w_enc, None, False), w_dec,
        _causal(5), None, False,
    )
    np.testing.assert_allclose(np.asarray(y, "float32"), expected, atol=3e-2)


# ---------------------------------------------------------------- saving, export, size


@pytest.mark.slow
@pytest.mark.tensorflow_only  # TFLite export
def test_tflite_encoder_and_cached_decoder_step_match_keras(rng):
    import tensorflow as tf

    from keras_seq.export import convert_to_tflite, run_tflite, tflite_op_names

    encoder = layers.TransformerEncoder(12, 2)
    source, padding = keras.Input((None, 8)), keras.Input((None,), dtype="bool")
    model = keras.Model([source, padding], encoder(source, padding_mask=padding))
    x = _x(rng, 2, 5, 8)
    mask = np.array([[1] * 5, [1] * 3 + [0] * 2], bool)
    flatbuffer = convert_to_tflite(model)
    assert not any(op.startswith("CUSTOM") for op in tflite_op_names(flatbuffer))
    np.testing.assert_allclose(run_tflite(flatbuffer, x, mask)[0], model([x, mask]), atol=1e-5)

    decoder = layers.TransformerDecoder(12, 2)
    e = _x(rng, 2, 4, 6)
    full = np.asarray(decoder(x, e))

    def step(x_t, e, self_cache, cross_cache, index):
        return decoder(
            x_t,
            e,
            self_attention_cache=self_cache,
            self_attention_cache_update_index=index,
            cross_attention_cache=cross_cache,
        )

    signature = [
        tf.TensorSpec((None, 1, 8)),
        tf.TensorSpec((None, None, 6)),
        tf.TensorSpec((None, 2, 5, 2, 4)),
        tf.TensorSpec((None, 2, None, 2, 4)),
        tf.TensorSpec((), tf.int32),
    ]
    flatbuffer = convert_to_tflite(step, signature)
    assert not any(op.startswith("CUSTOM") for op in tflite_op_names(flatbuffer))
    self_cache = np.zeros((2, 2, 5, 2, 4), "float32")
    _, _, cross_cache = decoder(
        x[:, :1], e, self_attention_cache=self_cache, self_attention_cache_update_index=0
    )
    cross_cache = np.asarray(cross_cache)
    for i in range(5):
        y_i, self_cache, _ = run_tflite(
            flatbuffer, x[:, i : i + 1], e, self_cache, cross_cache, np.int32(i)
        )
        np.testing.assert_allclose(y_i, full[:, i : i + 1], atol=1e-5)


def test_vaswani_base_parameter_count_matches_closed_form():
    d, h, d_ff, n = 512, 8, 2048, 6
    attention = 4 * (d * d + d)  # W_q, W_k, W_v, W_o with biases
    layer_norm = 2 * d
    feed_forward = d * d_ff + d_ff + d_ff * d + d
    expected = n * (attention + 2 * layer_norm + feed_forward) + n * (
        2 * attention + 3 * layer_norm + feed_forward
    )
    total = 0
    for _ in range(n):
        encoder = layers.TransformerEncoder(d_ff, h)
        encoder.build((None, None, d))
        decoder = layers.TransformerDecoder(d_ff, h)
        decoder.build((None, None, d), (None, None, d))
        total += encoder.count_params() + decoder.count_params()
    assert total == expected


def test_cached_decoding_of_embedding_masked_tokens_equals_full_causal(rng):
    # Tokens from Embedding(mask_zero=True) carry an implicit (B, 1) mask per
    # step; it describes the new token, not the S cache keys.
    embedding = keras.layers.Embedding(9, 8, mask_zero=True)
    decoder = layers.TransformerDecoder(12, 2)
    T = 4
    tokens = np.array([[3, 5, 2, 7], [4, 1, 6, 8]], "int32")  # no padding
    full = np.asarray(decoder(embedding(tokens)))
    cache = np.zeros((2, 2, T, 2, 4), "float32")
    for i in range(T):
        y_i, cache = decoder(
            embedding(tokens[:, i : i + 1]),
            self_attention_cache=cache,
            self_attention_cache_update_index=i,
        )
        np.testing.assert_allclose(y_i, full[:, i : i + 1], atol=1e-5)
