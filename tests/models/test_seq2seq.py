"""Seq2seq builders and the recurrent decoder: numerics, training, saving, errors."""

import keras
import numpy as np
import pytest
from monotonic_reference import expected_alignment, hard_alignment

from keras_seq import models


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _reference_attentive_gru_decoder(y, h, s0, source_mask, decoder):
    """NumPy transcription of RecurrentDecoder's equations (GRU, reset_after).

    e_ij = vᵀ tanh(W_q s_{i-1} + W_k h_j); α = softmax over unmasked j;
    c_i = Σ α_ij h_j; s_i = GRU([y_{i-1}; c_i], s_{i-1}); o_i = [s_i; c_i].
    """
    attention, cell = decoder.attention, decoder.cell
    w_q, w_k, v = (np.asarray(w) for w in (attention.query_kernel, attention.key_kernel,
                                           attention.score_vector))
    kernel, recurrent_kernel, bias = (np.asarray(w) for w in cell.weights)
    u = s0.shape[-1]
    s = s0
    outputs, alphas = [], []
    for i in range(y.shape[1]):
        e = np.tanh((s @ w_q)[:, None, :] + h @ w_k) @ v  # (B, S)
        e = np.where(source_mask, e, -np.inf)
        alpha = np.exp(e - e.max(-1, keepdims=True))
        alpha /= alpha.sum(-1, keepdims=True)
        c = np.einsum("bs,bsd->bd", alpha, h)
        x = np.concatenate([y[:, i], c], -1)
        x_proj = x @ kernel + bias[0]  # gate order z, r, h as in keras.layers.GRU
        s_proj = s @ recurrent_kernel + bias[1]
        z = _sigmoid(x_proj[:, :u] + s_proj[:, :u])
        r = _sigmoid(x_proj[:, u : 2 * u] + s_proj[:, u : 2 * u])
        h_tilde = np.tanh(x_proj[:, 2 * u :] + r * s_proj[:, 2 * u :])
        s = z * s + (1 - z) * h_tilde
        outputs.append(np.concatenate([s, c], -1))
        alphas.append(alpha)
    return np.stack(outputs, 1), np.stack(alphas, 1)


def test_recurrent_decoder_matches_numpy_equations(rng):
    decoder = models.RecurrentDecoder(6, cell="gru", attention_units=5)
    y = rng.normal(size=(3, 4, 2)).astype("float32")
    h = rng.normal(size=(3, 7, 8)).astype("float32")
    s0 = rng.normal(size=(3, 6)).astype("float32")
    mask = np.arange(7)[None, :] < np.array([[7], [3], [1]])
    out, alpha = decoder(y, h, initial_state=[s0], encoder_outputs_mask=mask,
                         return_attention_scores=True)
    expected_out, expected_alpha = _reference_attentive_gru_decoder(y, h, s0, mask, decoder)
    np.testing.assert_allclose(out, expected_out, atol=1e-5)
    np.testing.assert_allclose(alpha, expected_alpha, atol=1e-6)


def _reference_luong_gru_decoder(y, h, s0, source_mask, decoder, zoneout=0.0):
    """NumPy: RecurrentDecoder with Luong's general score e_ij = s_{i-1}·(h_j W_a)
    and, at inference, zoneout s_i = z s_{i-1} + (1 − z) GRU(...)."""
    w_a = np.asarray(decoder.attention.key_kernel)
    kernel, recurrent_kernel, bias = (np.asarray(w) for w in decoder.cell.weights)
    u = s0.shape[-1]
    s = s0
    outputs = []
    for i in range(y.shape[1]):
        e = np.einsum("bd,bsd->bs", s, h @ w_a)
        e = np.where(source_mask, e, -np.inf)
        alpha = np.exp(e - e.max(-1, keepdims=True))
        alpha /= alpha.sum(-1, keepdims=True)
        c = np.einsum("bs,bsd->bd", alpha, h)
        x_proj = np.concatenate([y[:, i], c], -1) @ kernel + bias[0]
        s_proj = s @ recurrent_kernel + bias[1]
        z = _sigmoid(x_proj[:, :u] + s_proj[:, :u])
        r = _sigmoid(x_proj[:, u : 2 * u] + s_proj[:, u : 2 * u])
        new = z * s + (1 - z) * np.tanh(x_proj[:, 2 * u :] + r * s_proj[:, 2 * u :])
        s = zoneout * s + (1 - zoneout) * new
        outputs.append(np.concatenate([s, c], -1))
    return np.stack(outputs, 1)


@pytest.mark.parametrize("zoneout", [0.0, 0.3])
def test_luong_decoder_with_zoneout_matches_numpy_equations(rng, zoneout):
    decoder = models.RecurrentDecoder(6, cell="gru", attention_units=6, attention="luong",
                                      zoneout=zoneout)
    y = rng.normal(size=(3, 4, 2)).astype("float32")
    h = rng.normal(size=(3, 7, 8)).astype("float32")
    s0 = rng.normal(size=(3, 6)).astype("float32")
    mask = np.arange(7)[None, :] < np.array([[7], [3], [1]])
    out = decoder(y, h, initial_state=[s0], encoder_outputs_mask=mask)
    assert decoder.attention.key_kernel.shape == (8, 6)  # W_a (dk, dq)
    expected = _reference_luong_gru_decoder(y, h, s0, mask, decoder, zoneout)
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_decoder_zoneout_in_training_keeps_or_updates_each_unit(rng):
    """Training: each unit of s_i is s_{i-1} or the GRU update (masks drawn per step)."""
    decoder = models.RecurrentDecoder(16, cell="gru", attention_units=16, attention="luong",
                                      zoneout=0.5)
    plain = models.RecurrentDecoder(16, cell="gru", attention_units=16, attention="luong")
    y = rng.normal(size=(4, 6, 2)).astype("float32")
    h = rng.normal(size=(4, 5, 3)).astype("float32")
    s0 = rng.normal(size=(4, 16)).astype("float32")
    plain(y, h, initial_state=[s0])
    decoder(y, h, initial_state=[s0])
    plain.set_weights(decoder.get_weights())
    out = np.asarray(decoder(y, h, initial_state=[s0], training=True))
    s, kept = s0, []
    for i in range(y.shape[1]):  # one plain step from the zoned state
        step = np.asarray(plain(y[:, i : i + 1], h, initial_state=[s]))[:, 0, :16]
        s_i = out[:, i, :16]
        keep = np.isclose(s_i, s, atol=1e-6)
        assert np.all(keep | np.isclose(s_i, step, atol=1e-5))
        kept.append(keep)
        s = s_i
    assert 0.35 < np.mean(kept) < 0.65


def test_loop_over_a_long_sequence_equals_the_unrolled_prefix(rng):
    # Up to 32 steps run unrolled; longer sequences in the backend's loop.
    decoder = models.RecurrentDecoder(5, cell="coupled", attention_units=4)
    y = rng.normal(size=(2, 40, 3)).astype("float32")
    h = rng.normal(size=(2, 4, 6)).astype("float32")
    looped = np.asarray(decoder(y, h))
    np.testing.assert_allclose(looped[:, :6], decoder(y[:, :6], h), atol=1e-6)


@pytest.mark.tensorflow_only  # tf.function with an unknown length: TensorFlow's loop
def test_unrolled_decoder_equals_loop_over_unknown_length(rng):
    import tensorflow as tf

    decoder = models.RecurrentDecoder(5, cell="coupled", attention_units=4)
    y = rng.normal(size=(2, 6, 3)).astype("float32")
    h = rng.normal(size=(2, 4, 6)).astype("float32")
    unrolled = decoder(y, h)  # static length: the Python-unrolled path

    @tf.function(input_signature=[tf.TensorSpec([None, None, 3]), tf.TensorSpec([None, None, 6])])
    def loop(y, h):  # unknown length: the tf.scan path
        return decoder(y, h)

    np.testing.assert_allclose(loop(y, h), unrolled, atol=1e-6)


def _copy_batch(rng, vocabulary_size=12, batch=32, length=5):
    source = rng.integers(4, vocabulary_size, size=(batch, length)).astype("int32")
    start = np.full((batch, 1), 2, "int32")
    end = np.full((batch, 1), 3, "int32")
    return (
        {"encoder_inputs": source, "decoder_inputs": np.concatenate([start, source], 1)},
        np.concatenate([source, end], 1),
    )


_BUILDERS = {
    "rnn_gru_bahdanau": lambda: models.rnn_seq2seq(12, 12, units=16, embedding_dim=8),
    "rnn_lstm_plain": lambda: models.rnn_seq2seq(
        12, 12, units=16, embedding_dim=8, cell="lstm", attention=None
    ),
    "transformer": lambda: models.transformer_seq2seq(
        12, 12, num_layers=1, model_dim=16, num_heads=2, intermediate_dim=32, dropout=0.0
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(_BUILDERS))
def test_seq2seq_loss_falls_when_training_a_copy_task(kind, rng):
    keras.utils.set_random_seed(0)
    model = _BUILDERS[kind]()
    model.compile(
        keras.optimizers.Adam(1e-2),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0),
    )
    x, y = _copy_batch(rng)
    loss = model.fit(x, y, epochs=20, batch_size=32, verbose=0).history["loss"]
    # The first entry is the loss of the untrained model (one step taken).
    assert loss[-1] < 0.8 * loss[0]


@pytest.mark.parametrize(
    "build",
    [
        lambda: models.rnn_seq2seq(12, 10, units=8, embedding_dim=4, cell="peephole"),
        lambda: models.rnn_seq2seq(12, 10, units=8, embedding_dim=4, cell="coupled",
                                   attention=None),
        lambda: models.rnn_seq2seq(12, 10, units=8, embedding_dim=4, cell="layernorm_lstm",
                                   attention="luong", zoneout=[0.1, 0.2]),
        lambda: models.transformer_seq2seq(12, 10, num_layers=1, model_dim=8, num_heads=2,
                                           intermediate_dim=16, normalize_first=True),
        lambda: models.transformer_seq2seq(12, 10, num_layers=1, model_dim=8, num_heads=2,
                                           intermediate_dim=16, tie_embeddings=False),
    ],
    ids=["rnn_peephole", "rnn_coupled_plain", "rnn_layernorm_luong_zoneout",
         "transformer_prenorm", "transformer_untied"],
)
def test_keras_file_round_trip_reproduces_outputs(build, rng, tmp_path):
    model = build()
    x, _ = _copy_batch(rng, vocabulary_size=10, batch=3)
    x["encoder_inputs"][1, 3:] = 0
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(restored(x), model(x), atol=1e-6)


@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_extra_source_padding_does_not_change_logits(kind, rng):
    model = (
        models.rnn_seq2seq(12, 12, units=8, embedding_dim=4)
        if kind == "rnn"
        else models.transformer_seq2seq(12, 12, num_layers=1, model_dim=8, num_heads=2,
                                        intermediate_dim=16)
    )
    x, _ = _copy_batch(rng, batch=4)
    padded = dict(x, encoder_inputs=np.pad(x["encoder_inputs"], ((0, 0), (0, 3))))
    np.testing.assert_allclose(model(padded), model(x), atol=1e-5)


def test_tied_output_projection_is_the_embedding_transpose(rng):
    embedding = models.TokenEmbedding(7, 4)
    ids = np.array([[1, 5, 0]])
    x = np.asarray(embedding(ids))
    np.testing.assert_allclose(x, 2.0 * np.asarray(embedding.embeddings)[ids], rtol=1e-6)
    h = rng.normal(size=(1, 3, 4)).astype("float32")
    np.testing.assert_allclose(
        embedding(h, reverse=True), h @ np.asarray(embedding.embeddings).T, rtol=1e-5, atol=1e-6
    )


def test_mixed_precision_keeps_float32_logits():
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = models.rnn_seq2seq(12, 12, units=8, embedding_dim=4)
    x, _ = _copy_batch(np.random.default_rng(0), batch=2)
    logits = model(x)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    assert model.get_layer("decoder").compute_dtype == "float16"
    assert np.isfinite(np.asarray(logits)).all()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: models.rnn_seq2seq(10, 10, cell="lstmx"), "rnn_seq2seq: invalid value for argument `cell`"),
        (lambda: models.rnn_seq2seq(10, 10, attention="dot"), "`attention`"),
        (lambda: models.rnn_seq2seq(10, 10, zoneout=1.0), "rnn_seq2seq.*`zoneout`"),
        (lambda: models.RecurrentDecoder(4, cell="simple", zoneout=1.2),
         "RecurrentDecoder.*`zoneout`"),
        (lambda: models.RecurrentDecoder(4, attention="dot"), "RecurrentDecoder.*`attention`"),
        (lambda: models.rnn_seq2seq(0, 10), "source_vocabulary_size"),
        (lambda: models.rnn_seq2seq(10, 10, dropout=1.5), "`dropout`"),
        (lambda: models.transformer_seq2seq(10, 10, model_dim=10, num_heads=4), "divide"),
        (lambda: models.RecurrentDecoder(-1), "RecurrentDecoder.*`units`"),
        (lambda: models.TokenEmbedding(5, 0), "TokenEmbedding.*invalid value for argument `output_dim`"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_attentive_decoder_without_encoder_outputs_is_rejected():
    with pytest.raises(ValueError, match="RecurrentDecoder: with attention"):
        models.RecurrentDecoder(4, attention_units=4)(np.zeros((1, 2, 3), "float32"))


def test_builders_accept_numpy_integers_and_reject_bools():
    model = models.rnn_seq2seq(np.int64(10), np.int32(9), units=np.int64(4), embedding_dim=2)
    assert model.output.shape[-1] == 9
    assert model.get_layer("decoder").units == 4
    with pytest.raises(TypeError, match="rnn_seq2seq: invalid type for argument `units`"):
        models.rnn_seq2seq(10, 10, units=True)
    with pytest.raises(
        TypeError, match="transformer_seq2seq: invalid type for argument `num_heads`"
    ):
        models.transformer_seq2seq(10, 10, model_dim=8, num_heads=True)
    with pytest.raises(ValueError, match="transformer_seq2seq: invalid value for argument `dropout`"):
        models.transformer_seq2seq(10, 10, model_dim=8, num_heads=2, dropout=1.0)


def test_seq2seq_kind_names_the_builder_and_survives_saving(tmp_path):
    rnn = models.rnn_seq2seq(10, 10, units=4, embedding_dim=2, attention=None)
    transformer = models.transformer_seq2seq(
        10, 10, num_layers=1, model_dim=4, num_heads=2, intermediate_dim=8
    )
    assert models.seq2seq_kind(rnn) == "rnn"
    assert models.seq2seq_kind(transformer) == "transformer"
    transformer.save(tmp_path / "t.keras")
    restored = keras.saving.load_model(tmp_path / "t.keras", safe_mode=True)
    assert models.seq2seq_kind(restored) == "transformer"
    assert models.seq2seq_kind(models.language_model(10, units=4, num_heads=2)) is None
    assert models.seq2seq_kind(models.sequence_classifier(10, 2, units=4)) is None
    assert models.seq2seq_kind("model.keras") is None


def _reference_monotonic_gru_decoder(y, h, s0, source_mask, decoder, hard):
    """NumPy: RecurrentDecoder with Bahdanau's energy made monotonic (Raffel et
    al. 2017), p_ij = σ(e_ij + r) (0 at padding), α from α_{i-1} (one-hot at
    the first position before the first step), c_i = Σ α_ij h_j."""
    attention = decoder.attention
    w_q, w_k, v = (np.asarray(w, "float64") for w in (
        attention.query_kernel, attention.key_kernel, attention.score_vector))
    r = float(np.asarray(attention.score_bias))
    kernel, recurrent_kernel, bias = (np.asarray(w, "float64") for w in decoder.cell.weights)
    u = s0.shape[-1]
    s, alpha = s0.astype("float64"), np.zeros(h.shape[:2])
    alpha[:, 0] = 1.0
    outputs, alphas = [], []
    for i in range(y.shape[1]):
        e = np.tanh((s @ w_q)[:, None, :] + h @ w_k) @ v + r
        p = np.where(source_mask, _sigmoid(e), 0.0)
        alpha = hard_alignment(p, alpha) if hard else expected_alignment(p, alpha)
        c = np.einsum("bs,bsd->bd", alpha, h)
        x_proj = np.concatenate([y[:, i], c], -1) @ kernel + bias[0]
        s_proj = s @ recurrent_kernel + bias[1]
        z = _sigmoid(x_proj[:, :u] + s_proj[:, :u])
        rr = _sigmoid(x_proj[:, u : 2 * u] + s_proj[:, u : 2 * u])
        s = z * s + (1 - z) * np.tanh(x_proj[:, 2 * u :] + rr * s_proj[:, 2 * u :])
        outputs.append(np.concatenate([s, c], -1))
        alphas.append(alpha)
    return np.stack(outputs, 1), np.stack(alphas, 1)


@pytest.mark.parametrize("training", [False, True])
def test_monotonic_decoder_is_hard_at_inference_and_expected_in_training(training, rng):
    decoder = models.RecurrentDecoder(6, cell="gru", attention_units=5,
                                      attention="monotonic_bahdanau")
    y = rng.normal(size=(3, 5, 2)).astype("float32")
    h = rng.normal(size=(3, 7, 8)).astype("float32")
    s0 = rng.normal(size=(3, 6)).astype("float32")
    mask = np.arange(7)[None, :] < np.array([[7], [4], [2]])
    decoder.build(y.shape, h.shape)
    for weight in decoder.attention.weights[:3]:  # energies of both signs
        weight.assign(rng.normal(0.0, 1.0, weight.shape).astype("float32"))
    decoder.attention.score_bias.assign(-0.5)
    decoder.attention.sigmoid_noise = 0.0  # the noise of training, off to compare
    out, alpha = decoder(y, h, initial_state=[s0], encoder_outputs_mask=mask,
                         return_attention_scores=True, training=training)
    expected_out, expected_alpha = _reference_monotonic_gru_decoder(
        y, h.astype("float64"), s0, mask, decoder, hard=not training)
    np.testing.assert_allclose(np.asarray(alpha), expected_alpha, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out), expected_out, atol=1e-5)
    if not training:  # one-hot or all zeros, never moving left; here it moves
        positions = np.where(expected_alpha.any(-1), expected_alpha.argmax(-1), 99)
        assert set(np.unique(expected_alpha)) <= {0.0, 1.0}
        assert (np.diff(positions, axis=1) >= 0).all()
        assert (0 < positions[positions < 99]).any()


@pytest.mark.parametrize("attention", ["monotonic_bahdanau", "monotonic_luong"])
def test_a_monotonic_model_reads_left_to_right_and_round_trips(attention, rng, tmp_path):
    keras.utils.set_random_seed(0)
    model = models.rnn_seq2seq(12, 10, units=8, embedding_dim=4, attention=attention)
    x, _ = _copy_batch(rng, vocabulary_size=10, batch=3)
    # The encoder is left to right: the annotations of a prefix do not
    # depend on what follows it.
    encoder = model.get_layer("encoder")
    h = np.asarray(encoder(x["encoder_inputs"]))
    np.testing.assert_allclose(np.asarray(encoder(x["encoder_inputs"][:, :3])), h[:, :3],
                               atol=1e-6)
    path = tmp_path / "monotonic.keras"
    model.save(path)
    restored = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(restored(x), model(x), atol=1e-6)
