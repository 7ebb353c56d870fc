"""TFLite export: frozen weights, op listing, running, and translation models
(forward pass, encoder + one decoder step, host-loop greedy decoding)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_seq import decoding, models
from keras_seq.decoding import greedy_decode
from keras_seq.export import (
    convert_decoder_steps_to_tflite,
    convert_seq2seq_to_tflite,
    convert_to_tflite,
    run_tflite,
    tflite_greedy_decode,
    tflite_op_names,
)
from keras_seq.text import END_ID, START_ID


@pytest.fixture(scope="module")
def dense_flatbuffer():
    inputs = keras.Input((None, 3))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    return model, convert_to_tflite(model)


def test_converted_dense_model_matches_keras_with_frozen_weights(dense_flatbuffer, rng):
    model, flatbuffer = dense_flatbuffer
    # Weights become constants: no resource variables left to initialise.
    assert not {"VAR_HANDLE", "READ_VARIABLE"} & tflite_op_names(flatbuffer)
    x = rng.normal(size=(4, 5, 3)).astype("float32")
    kernel, bias = model.get_weights()
    np.testing.assert_allclose(run_tflite(flatbuffer, x)[0], x @ kernel + bias, atol=1e-5)


def test_run_tflite_rejects_wrong_number_of_inputs(dense_flatbuffer):
    _, flatbuffer = dense_flatbuffer
    with pytest.raises(ValueError, match="run_tflite: the model takes 1 inputs, received 2"):
        run_tflite(flatbuffer, np.zeros((1, 2, 3), "float32"), np.zeros((1,), "float32"))


# ---------------------------------------------------------------- translation models

TARGET_LENGTH = 9


def _tiny_seq2seq(kind):
    # Weights chosen so that greedy outputs vary from row to row and step to
    # step (a constant output would prove little): larger random weights for
    # the GRU model; the pre-norm Transformer varies with its initialisers.
    keras.utils.set_random_seed(3)
    if kind == "transformer":
        return models.transformer_seq2seq(
            20, 15, num_layers=2, model_dim=8, num_heads=2, intermediate_dim=16, dropout=0.0,
            normalize_first=True,
        )
    model = models.rnn_seq2seq(20, 15, units=8, embedding_dim=4, cell="gru")
    rng = np.random.default_rng(4)
    model.set_weights(
        [rng.normal(scale=0.5, size=w.shape).astype(w.dtype) for w in model.get_weights()]
    )
    return model


@pytest.fixture(scope="module", params=["rnn_gru_bahdanau", "transformer"])
def seq2seq(request):
    model = _tiny_seq2seq(request.param)
    forward = convert_seq2seq_to_tflite(model)
    encoder, decoder_step = convert_decoder_steps_to_tflite(model, TARGET_LENGTH)
    return model, forward, encoder, decoder_step


def _padded_ids(rng, vocabulary_size, lengths, width):
    ids = rng.integers(4, vocabulary_size, (len(lengths), width)).astype("int32")
    ids[np.arange(width)[None, :] >= np.array(lengths)[:, None]] = 0
    return ids


@pytest.mark.slow
def test_seq2seq_tflite_is_builtin_only(seq2seq):
    _, forward, encoder, decoder_step = seq2seq
    for flatbuffer in (forward, encoder, decoder_step):
        ops = tflite_op_names(flatbuffer)
        assert not [op for op in ops if op.startswith("CUSTOM")], ops
        assert not {"VAR_HANDLE", "READ_VARIABLE"} & ops


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(3, 7, 5), (1, 4, 11)])
def test_seq2seq_tflite_forward_matches_keras_for_any_batch_and_lengths(seq2seq, shape, rng):
    model, forward, _, _ = seq2seq
    batch, source_length, target_length = shape
    x = _padded_ids(rng, 20, rng.integers(1, source_length + 1, batch), source_length)
    y = _padded_ids(rng, 15, rng.integers(1, target_length + 1, batch), target_length)
    expected = model({"encoder_inputs": x, "decoder_inputs": y})
    (got,) = run_tflite(forward, x, y)
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.slow
def test_tflite_host_loop_greedy_equals_in_graph_greedy_and_teacher_forcing(seq2seq, rng):
    model, _, encoder, decoder_step = seq2seq
    x = _padded_ids(rng, 20, [7, 3, 1, 5], 7)
    got = tflite_greedy_decode(encoder, decoder_step, x, TARGET_LENGTH)
    np.testing.assert_array_equal(got, greedy_decode(model, x, TARGET_LENGTH))
    assert len({tuple(row) for row in got}) > 1
    # Each chosen token is the argmax of the teacher-forced model's logits on
    # the prefix before it: the step path computes what training computed.
    decoder_inputs = np.concatenate([np.full((4, 1), START_ID, np.int32), got[:, :-1]], 1)
    logits = np.asarray(model({"encoder_inputs": x, "decoder_inputs": decoder_inputs}))
    live = np.cumsum(got == END_ID, axis=1) - (got == END_ID) == 0  # up to and incl. END
    np.testing.assert_array_equal(np.argmax(logits, -1)[live], got[live])
    if "transformer" in model.name:
        # The caches hold TARGET_LENGTH steps; a longer loop must not run clamped.
        with pytest.raises(ValueError, match="`max_length` must be at most the target_length"):
            tflite_greedy_decode(encoder, decoder_step, x, TARGET_LENGTH + 1)


@pytest.mark.slow
def test_tflite_decoder_step_logits_match_keras_step(seq2seq, rng):
    model, _, encoder, decoder_step = seq2seq
    x = _padded_ids(rng, 20, [6, 2], 6)
    constants_and_state = run_tflite(encoder, x)
    steps = decoding.decoder_steps(model)
    constants, state = steps.start(tf.constant(x), TARGET_LENGTH)
    flat_constants = tf.nest.flatten(constants)
    n = len(flat_constants)
    for expected, got in zip(flat_constants, constants_and_state[:n]):
        np.testing.assert_allclose(got, expected, atol=1e-5)
    tflite_state = constants_and_state[n:]
    tokens = np.array([START_ID, 7], np.int32)
    for t in range(3):
        logits, state = steps.step(tf.constant(tokens), tf.constant(t), constants, state)
        tflite_logits, *tflite_state = run_tflite(
            decoder_step, tokens, np.int32(t), *constants_and_state[:n], *tflite_state
        )
        np.testing.assert_allclose(tflite_logits, logits, atol=1e-5)
        tokens = np.argmax(tflite_logits, -1).astype(np.int32)


def test_seq2seq_converters_reject_other_models():
    classifier = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="convert_seq2seq_to_tflite: invalid value for argument `model`: expected a translation"):
        convert_seq2seq_to_tflite(classifier)
    model = models.rnn_seq2seq(5, 5, units=2, embedding_dim=2)
    with pytest.raises(ValueError, match="invalid value for argument `target_length`: expected a positive integer"):
        convert_decoder_steps_to_tflite(model, 0)


# ---------------------------------------------------------------- options


def test_quantized_dense_model_stays_close_to_keras(rng):
    # Large enough that the weights, not the graph, make most of the file.
    inputs = keras.Input((None, 128))
    model = keras.Model(inputs, keras.layers.Dense(256)(inputs))
    x = rng.normal(size=(2, 3, 128)).astype("float32")
    expected = np.asarray(model(x))
    float_size = len(convert_to_tflite(model))
    for quantize, atol, max_size in (("float16", 1e-2, float_size / 1.5),
                                     ("dynamic", 1e-1, float_size / 2.5)):
        flatbuffer = convert_to_tflite(model, quantize=quantize)
        assert len(flatbuffer) < max_size, quantize
        np.testing.assert_allclose(run_tflite(flatbuffer, x)[0], expected, atol=atol)


def test_batch_size_fixes_the_batch_dimension(dense_flatbuffer):
    from ai_edge_litert.interpreter import Interpreter

    model, _ = dense_flatbuffer
    flatbuffer = convert_to_tflite(model, batch_size=np.int64(2))
    (detail,) = Interpreter(model_content=flatbuffer).get_input_details()
    assert list(detail["shape_signature"]) == [2, -1, 3]


def test_converters_reject_bad_quantize_and_batch_size(dense_flatbuffer):
    model, _ = dense_flatbuffer
    with pytest.raises(ValueError, match=r"convert_to_tflite: invalid value for argument `quantize`: .*received 'int4'"):
        convert_to_tflite(model, quantize="int4")
    for bad in (0, 1.5):
        with pytest.raises(ValueError, match=r"convert_to_tflite: invalid value for argument `batch_size`"):
            convert_to_tflite(model, batch_size=bad)
    with pytest.raises(TypeError, match=r"convert_to_tflite: invalid type for argument `batch_size`"):
        convert_to_tflite(model, batch_size=True)
    with pytest.raises(ValueError, match="convert_to_tflite: `batch_size` sets the batch"):
        convert_to_tflite(model, [tf.TensorSpec([None, None, 3])], batch_size=1)
    seq2seq = models.rnn_seq2seq(5, 5, units=2, embedding_dim=2)
    with pytest.raises(ValueError, match=r"convert_seq2seq_to_tflite: invalid value for argument `quantize`"):
        convert_seq2seq_to_tflite(seq2seq, quantize="int8")
    with pytest.raises(ValueError, match=r"convert_decoder_steps_to_tflite: invalid value for argument `quantize`"):
        convert_decoder_steps_to_tflite(seq2seq, 4, quantize=True)
