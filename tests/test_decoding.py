"""Greedy and beam-search decoding against the teacher-forced models."""

import itertools
import math
import subprocess

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_seq import decoding, models, samplers
from keras_seq._unused_imports import python_command
from keras_seq.text import END_ID, PAD_ID, START_ID

V = 12  # vocabulary size of the test models
L = 6  # decoding buffer length


@pytest.fixture(scope="module")
def seq2seq_models():
    keras.utils.set_random_seed(3)
    return {
        "rnn": models.rnn_seq2seq(V, V, units=16, embedding_dim=8),
        "rnn_plain_lstm": models.rnn_seq2seq(V, V, units=16, embedding_dim=8, cell="lstm",
                                             attention=None),
        "transformer": models.transformer_seq2seq(V, V, num_layers=2, model_dim=16, num_heads=2,
                                                  intermediate_dim=32),
    }


def _sources(seed=0):
    rng = np.random.default_rng(seed)
    source = rng.integers(4, V, size=(4, 7)).astype("int32")
    source[1, 4:] = 0
    source[3, 2:] = 0
    return source


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _teacher_forced_log_prob(model, source, ids):
    """log p(ids | source) from one teacher-forced call, summed in NumPy up to END."""
    ids = np.asarray(ids)
    decoder_inputs = np.concatenate([np.full((len(ids), 1), START_ID), ids[:, :-1]], 1)
    logits = np.asarray(model({"encoder_inputs": source, "decoder_inputs": decoder_inputs}))
    token_log_probs = np.take_along_axis(_log_softmax(logits), ids[..., None], -1)[..., 0]
    total = np.zeros(len(ids))
    for b, row in enumerate(ids):
        n = list(row).index(END_ID) + 1 if END_ID in row else len(row)
        total[b] = token_log_probs[b, :n].sum()
    return total


def _until_end(row):
    row = list(row)
    return row[: row.index(END_ID) + 1] if END_ID in row else row


@pytest.mark.parametrize("kind", ["rnn", "rnn_plain_lstm", "transformer"])
def test_greedy_equals_stepwise_argmax_of_teacher_forced_model(kind, seq2seq_models):
    model = seq2seq_models[kind]
    source = _sources()
    greedy = np.asarray(decoding.greedy_decode(model, source, L))
    # Uncached reference: rerun the whole model on the growing prefix each step.
    prefix = np.full((len(source), 1), START_ID, "int32")
    for _ in range(L):
        logits = model({"encoder_inputs": source, "decoder_inputs": prefix})
        prefix = np.concatenate([prefix, np.argmax(logits[:, -1], -1)[:, None]], 1)
    for got, expected in zip(greedy, prefix[:, 1:]):
        n = len(_until_end(expected))
        assert list(got[:n]) == list(expected[:n])
        assert (got[n:] == PAD_ID).all()  # nothing after END


@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_cached_step_logits_equal_teacher_forced_logits(kind, seq2seq_models):
    model = seq2seq_models[kind]
    source = _sources(1)
    targets = np.random.default_rng(1).integers(4, V, size=(len(source), L)).astype("int32")
    decoder_inputs = np.concatenate([np.full((len(source), 1), START_ID), targets[:, :-1]], 1)
    full = np.asarray(model({"encoder_inputs": source, "decoder_inputs": decoder_inputs}))
    steps = decoding.decoder_steps(model)
    constants, state = steps.start(tf.constant(source), L)
    for t in range(L):
        logits, state = steps.step(tf.constant(decoder_inputs[:, t]), t, constants, state)
        np.testing.assert_allclose(logits, full[:, t], atol=1e-4)


@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_beam_width_one_equals_greedy(kind, seq2seq_models):
    model = seq2seq_models[kind]
    source = _sources(2)
    ids, _ = decoding.beam_search(model, source, L, beam_width=1)
    np.testing.assert_array_equal(ids, decoding.greedy_decode(model, source, L))


@pytest.mark.parametrize("kind", ["rnn", "rnn_plain_lstm", "transformer"])
def test_beam_search_score_is_the_teacher_forced_log_probability(kind, seq2seq_models):
    model = seq2seq_models[kind]
    source = _sources(3)
    ids, log_probs = decoding.beam_search(model, source, L, beam_width=4)
    beam_reference = _teacher_forced_log_prob(model, source, ids)
    np.testing.assert_allclose(log_probs, beam_reference, atol=1e-4)
    np.testing.assert_allclose(
        decoding.sequence_log_probability(model, source, ids), beam_reference, atol=1e-4
    )
    # (Beam search need not beat greedy on an untrained, near-uniform model: a
    # greedy prefix can drop out of the beam; see the constructed example below.)


@pytest.mark.parametrize("kind", ["rnn", "transformer"])
@pytest.mark.parametrize("shape", [(4, 7), (None, 7), (4, None), (None, None)])
def test_searches_trace_with_static_or_dynamic_batch_and_length(kind, shape, seq2seq_models):
    # A fixed-shape batch (what a user passes to tf.function directly, and
    # what `keras-seq export --beam N` traces) must trace like a dynamic one.
    model = seq2seq_models[kind]
    source = _sources(4)
    spec = [tf.TensorSpec(shape, tf.int32)]
    beam = tf.function(lambda x: decoding.beam_search(model, x, L, beam_width=3),
                       input_signature=spec)
    greedy = tf.function(lambda x: decoding.greedy_decode(model, x, L), input_signature=spec)
    ids, log_probs = beam(source)
    np.testing.assert_allclose(log_probs, _teacher_forced_log_prob(model, source, ids), atol=1e-4)
    np.testing.assert_array_equal(ids, decoding.beam_search(model, source, L, beam_width=3)[0])
    np.testing.assert_array_equal(greedy(source), decoding.greedy_decode(model, source, L))


def test_beam_search_traces_on_the_fixed_shape_batch_it_is_called_with(seq2seq_models):
    model = seq2seq_models["rnn"]
    source = _sources(6)
    search = tf.function(lambda x: decoding.beam_search(model, x, L, beam_width=4))
    ids, log_probs = search(tf.constant(source))
    assert ids.shape == (len(source), L)
    np.testing.assert_allclose(log_probs, _teacher_forced_log_prob(model, source, ids), atol=1e-4)


class _MarkovSteps:
    """A constructed decoder: p(next | previous token) from a fixed table."""

    def __init__(self, table):
        self.log_table = tf.constant(np.log(np.asarray(table) + 1e-30), tf.float32)

    def start(self, encoder_inputs, max_length):
        return {}, {"dummy": tf.zeros([tf.shape(encoder_inputs)[0], 1])}

    def step(self, tokens, t, constants, state):
        return tf.gather(self.log_table, tokens), state


def _table():
    # ids: 0 PAD, 1 UNK, 2 START, 3 END, 4 A, 5 B
    table = np.zeros((6, 6))
    table[START_ID, [4, 5]] = [0.6, 0.4]  # greedy takes A ...
    table[4, [END_ID, 4, 5]] = [0.4, 0.3, 0.3]  # ... and ends with p = 0.24,
    table[5, [END_ID, 4]] = [0.9, 0.1]  # while B END has p = 0.36
    table[[0, 1, 3], 0] = 1.0
    table[START_ID - 1 + 0, 0] = 1.0
    return table


def _brute_force_best(table, max_length, alpha):
    """Exhaustive search of log p(Y) / lp(Y) over every token sequence."""
    best, best_score = None, -math.inf
    for tokens in itertools.product(range(len(table)), repeat=max_length):
        log_p, previous, length = 0.0, START_ID, max_length
        for i, token in enumerate(tokens):
            log_p += math.log(table[previous, token] + 1e-30)
            previous = token
            if token == END_ID:
                length = i + 1
                break
        if any(token != PAD_ID for token in tokens[length:]):
            continue
        score = log_p / ((5 + length) / 6) ** alpha
        if score > best_score:
            best, best_score = list(tokens), score
    return best


def test_beam_search_finds_the_most_probable_sequence_where_greedy_does_not():
    steps = _MarkovSteps(_table())
    source = tf.zeros([1, 2], tf.int32)
    greedy = samplers.GreedySampler()(steps, source, 3).numpy()[0]
    ids, log_prob = samplers.BeamSampler(2).search(steps, source, 3)
    assert list(greedy) == [4, END_ID, PAD_ID]
    assert list(ids.numpy()[0]) == [5, END_ID, PAD_ID] == _brute_force_best(_table(), 3, 0.0)
    np.testing.assert_allclose(log_prob, [math.log(0.36)], rtol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 1.0, 6.0])
def test_exhaustive_beam_equals_brute_force_with_length_penalty(alpha):
    table = _table()
    table[4, [END_ID, 4, 5]] = [0.2, 0.7, 0.1]  # a long, likely A A A path
    table[5, [END_ID, 4]] = [0.5, 0.5]
    steps = _MarkovSteps(table)
    source = tf.zeros([1, 2], tf.int32)
    # 6^3 beams keep every prefix, so the search is exhaustive.
    ids, _ = samplers.BeamSampler(216, alpha).search(steps, source, 3)
    assert list(ids.numpy()[0]) == _brute_force_best(table, 3, alpha)


@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_mixed_length_batch_equals_decoding_each_example_alone(kind, seq2seq_models):
    model = seq2seq_models[kind]
    source = _sources(4)
    batch_greedy = np.asarray(decoding.greedy_decode(model, source, L))
    batch_beam, _ = decoding.beam_search(model, source, L, beam_width=3)
    for b, row in enumerate(source):
        alone = row[row != PAD_ID][None, :]
        np.testing.assert_array_equal(decoding.greedy_decode(model, alone, L)[0], batch_greedy[b])
        np.testing.assert_array_equal(
            decoding.beam_search(model, alone, L, beam_width=3)[0][0], batch_beam[b]
        )


@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_empty_batch_returns_empty_result(kind, seq2seq_models):
    model = seq2seq_models[kind]
    empty = np.zeros((0, 5), "int32")
    assert decoding.greedy_decode(model, empty, L).shape == (0, L)
    ids, log_probs = decoding.beam_search(model, empty, L, beam_width=2)
    assert ids.shape == (0, L) and log_probs.shape == (0,)


def test_decoders_run_from_a_saved_model(seq2seq_models, tmp_path):
    model = seq2seq_models["transformer"]
    module = tf.Module()
    module.model = model
    spec = tf.TensorSpec([None, None], tf.int32)
    module.greedy = tf.function(lambda x: decoding.greedy_decode(model, x, L),
                                input_signature=[spec])
    module.beam = tf.function(lambda x: decoding.beam_search(model, x, L, beam_width=3)[0],
                              input_signature=[spec])
    tf.saved_model.save(module, str(tmp_path))
    restored = tf.saved_model.load(str(tmp_path))
    source = _sources(5)
    np.testing.assert_array_equal(restored.greedy(source), decoding.greedy_decode(model, source, L))
    np.testing.assert_array_equal(
        restored.beam(source), decoding.beam_search(model, source, L, beam_width=3)[0]
    )


def test_bad_arguments_raise_value_error(seq2seq_models):
    model = seq2seq_models["rnn"]
    source = _sources()
    with pytest.raises(ValueError, match="greedy_decode: invalid value for argument `max_length`"):
        decoding.greedy_decode(model, source, 0)
    with pytest.raises(ValueError, match="beam_search: invalid value for argument `beam_width`"):
        decoding.beam_search(model, source, L, beam_width=0)
    with pytest.raises(TypeError, match="greedy_decode: invalid type for argument `encoder_inputs`"):
        decoding.greedy_decode(model, source.astype("float32"), L)
    classifier = models.sequence_classifier(V, 2, units=4)
    with pytest.raises(ValueError, match="a keras_seq.tasks.Seq2SeqLM"):
        decoding.greedy_decode(classifier, source, L)


@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_attention_weights_are_distributions_over_unpadded_source(kind, seq2seq_models):
    source = _sources()
    decoder_inputs = np.array([[START_ID, 5, 6, 7, 0]] * 4, "int32")
    alpha = np.asarray(decoding.attention_weights(seq2seq_models[kind], source, decoder_inputs))
    assert alpha.shape == (4, 5, 7)
    padded = np.broadcast_to((source == PAD_ID)[:, None, :], alpha.shape)
    np.testing.assert_array_equal(alpha[padded], 0.0)
    np.testing.assert_allclose(alpha.sum(-1), 1.0, atol=1e-5)
    assert np.all(alpha >= 0.0)


def test_attention_weights_of_a_model_without_attention_raise(seq2seq_models):
    with pytest.raises(ValueError, match="attention=None"):
        decoding.attention_weights(
            seq2seq_models["rnn_plain_lstm"], _sources(), np.full((4, 2), START_ID, "int32")
        )


def test_importing_decoding_does_not_import_tensorflow_text():
    script = (
        "import sys, keras_seq.decoding\n"
        "assert callable(keras_seq.decoding.greedy_decode)\n"
        "print(sorted(m for m in sys.modules if m.startswith('tensorflow_text')))\n"
    )
    import os

    import keras_seq

    # The keras_seq under test, whatever sys.path the subprocess would have.
    root = os.path.dirname(os.path.dirname(os.path.abspath(keras_seq.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(python_command(code=script), capture_output=True, text=True,
                          check=True, timeout=300, env=env)
    assert done.stdout.strip().splitlines()[-1] == "[]"


class _StrideSteps:
    """Toy `DecoderSteps`: the next token is the last one plus the row's stride.

    The stride is read from the inputs (any rank), and the state counts the
    steps so that each step can check the position it is given.
    """

    def start(self, inputs, max_length):
        stride = tf.cast(tf.reshape(inputs, [tf.shape(inputs)[0], -1])[:, 0], tf.int32)
        return {"stride": stride}, {"t": tf.constant(0)}

    def step(self, tokens, t, constants, state):
        tf.debugging.assert_equal(t, state["t"])
        return 5.0 * tf.one_hot(tokens + constants["stride"], 16), {"t": state["t"] + 1}


@pytest.mark.parametrize("max_length", [7, 4])
def test_greedy_decode_steps_follows_any_decoder_steps(max_length):
    strides = [1, 2, 3, 6]
    inputs = np.zeros((4, 2, 3), "float32")  # rank 3, like a batch of images
    inputs[:, 0, 0] = strides
    ids = decoding.greedy_decode_steps(_StrideSteps(), inputs, max_length, start_id=4, end_id=10)
    for row, stride in zip(np.asarray(ids), strides):
        expected = list(range(4 + stride, 11, stride))[:max_length]  # up to END = 10
        assert list(row) == expected + [PAD_ID] * (max_length - len(expected))


def test_greedy_decode_steps_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="greedy_decode_steps: invalid value for argument `max_length`"):
        decoding.greedy_decode_steps(_StrideSteps(), np.ones((2, 3)), 0)
    with pytest.raises(ValueError, match="greedy_decode_steps: .*`inputs`"):
        decoding.greedy_decode_steps(_StrideSteps(), np.float32(1.0), 3)
