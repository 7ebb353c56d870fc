"""A monotonic-attention translator streamed in LiteRT emits greedy decoding's tokens.

The reference is greedy decoding in Keras on the whole source
(`keras_seq.decoding.decoder_steps`, argmax fed back); the streamed run gets
the source in chunks and must emit the same tokens, some of them before the
last chunk arrives.
"""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_seq import decoding, models
from keras_seq.reserved_tokens import END_ID, START_ID

pytestmark = pytest.mark.tensorflow_only
V, MAX = 14, 12


def _keras_greedy(model, source):
    steps = decoding.decoder_steps(model)
    constants, state = steps.start(tf.constant(source[None]), MAX)
    tokens, token = [], START_ID
    while len(tokens) < MAX and (not tokens or tokens[-1] != END_ID):
        logits, state = steps.step(tf.constant([token]), tf.constant(len(tokens)), constants,
                                   state)
        token = int(np.argmax(np.asarray(logits)[0]))
        tokens.append(token)
    return tokens


@pytest.fixture(scope="module")
def translator():
    """A monotonic translator trained to copy its source: it can emit each
    token as soon as the source token arrives."""
    keras.utils.set_random_seed(1)
    model = models.rnn_seq2seq(V, V, units=16, embedding_dim=8, attention="monotonic_luong")
    rng = np.random.default_rng(0)
    source = rng.integers(4, V, size=(512, 8)).astype("int32")
    inputs = {"encoder_inputs": source,
              "decoder_inputs": np.pad(source, ((0, 0), (1, 0)), constant_values=START_ID)}
    model.compile(keras.optimizers.Adam(0.02),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0))
    model.fit(inputs, np.pad(source, ((0, 0), (0, 1)), constant_values=END_ID), epochs=15,
              batch_size=64, verbose=0)
    return model


@pytest.mark.slow
def test_the_stream_emits_greedy_decodings_tokens_before_the_source_ends(translator):
    from keras_seq.export import convert_streaming_translator_to_tflite, tflite_op_names
    from keras_seq.export.streaming_translation import tflite_streaming_translate

    flatbuffers = convert_streaming_translator_to_tflite(translator)
    for flatbuffer in flatbuffers.values():
        assert not any(name.startswith("FlexDelegate") or name == "CUSTOM"
                       for name in tflite_op_names(flatbuffer))
    rng = np.random.default_rng(5)
    early, total = 0, 0
    for _ in range(4):
        source = rng.integers(4, V, size=8).astype("int32")
        expected = _keras_greedy(translator, source)
        for sizes in ([8], [3, 3, 2], [1] * 8):
            chunks = np.split(source, np.cumsum(sizes)[:-1])
            tokens, emitted = tflite_streaming_translate(flatbuffers, chunks, MAX)
            assert tokens == expected, (source, sizes)
            assert emitted[-1] == len(tokens) and emitted == sorted(emitted)
            if len(sizes) == 8:
                early, total = early + emitted[-2], total + len(tokens)
    # One token per source token: most of the output leaves before the source ends.
    assert early > total / 2


def test_the_streaming_export_refuses_soft_attention(rng):
    from keras_seq.export import convert_streaming_translator_to_tflite

    with pytest.raises(ValueError, match="convert_streaming_translator_to_tflite.*monotonic"):
        convert_streaming_translator_to_tflite(models.rnn_seq2seq(V, V, units=8,
                                                                  embedding_dim=4))


@pytest.mark.slow
def test_export_writes_the_stream_and_verify_runs_it_without_keras_seq(translator, tmp_path):
    import json

    from keras_seq import text
    from keras_seq.export import export_run, verify

    # A run folder as `keras-seq train` writes it: ids 4..13 are "a".."j".
    run = tmp_path / "run"
    run.mkdir()
    translator.save(run / "model.keras")
    text.CharTokenizer.from_corpus(["abcdefghij"]).save(run)
    (run / "metrics.json").write_text(json.dumps({"config": {"source_length": 8,
                                                             "target_length": MAX}}))
    rng = np.random.default_rng(7)
    sources = ["".join("abcdefghij"[i] for i in rng.integers(0, 10, size=8)) for _ in range(12)]
    (run / "test.tsv").write_text("".join(f"{s}\t{s}\n" for s in sources), encoding="utf-8")
    written = export_run(run, tmp_path / "out", formats=("tflite",))
    assert os.path.isfile(written["tflite_stream_decoder_step"])
    result = verify(tmp_path / "out")
    assert result["passed"], result["failures"]
    (row,) = [r for r in result["artifacts"] if r["format"] == "tflite_stream"]
    assert row["string_match"] == 1.0  # every output as Keras' greedy decoding
    assert row["emitted_before_source_end"] > 0.5 and row["latency_ms_per_token"] > 0
    assert "CUSTOM" not in row["ops"]
