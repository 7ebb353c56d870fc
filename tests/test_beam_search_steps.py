"""`decoding.beam_search_steps`: beam search over any `DecoderSteps`.

References are independent of the search: greedy decoding, and an exhaustive
enumeration in Python of every output sequence of a toy decoder whose
next-token distribution is a fixed table.
"""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_seq import decoding, models
from keras_seq.reserved_tokens import END_ID, PAD_ID, START_ID

V = 6  # toy vocabulary: the 4 reserved ids, then A = 4 and B = 5
A, B = 4, 5


def _log_softmax(x):
    x = np.asarray(x, "float64")
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


class _MarkovSteps:
    """p(y_t | y_{t-1}) from one logit table per example, passed as a constant.

    ``start`` reads only the example index from ``inputs`` (B,), so the
    constants have a batch axis that the search must tile per beam.
    """

    def __init__(self, logits):
        self.logits = tf.constant(logits, tf.float32)  # (N, V, V)

    def start(self, inputs, max_length):
        return {"table": tf.gather(self.logits, inputs)}, {"unused": tf.zeros_like(inputs)}

    def step(self, tokens, t, constants, state):
        return tf.gather(constants["table"], tokens, batch_dims=1), state


class _HistorySteps:
    """p(y_t | y_{t-2}, y_{t-1}): the token before last is read from the state.

    The state is the history of fed tokens, ``(B, max_length)``; column t is
    written at step t. If the search gave a beam another beam's history, its
    logits would be those of the wrong prefix.
    """

    def __init__(self, logits):
        self.logits = tf.constant(logits, tf.float32)  # (N, V, V, V)

    def start(self, inputs, max_length):
        history = tf.zeros([tf.shape(inputs)[0], max_length], tf.int32)
        return {"table": tf.gather(self.logits, inputs)}, {"history": history}

    def step(self, tokens, t, constants, state):
        history = state["history"]
        before = tf.where(t > 0, tf.gather(history, tf.maximum(t - 1, 0), axis=1), START_ID)
        table = tf.gather(constants["table"], before, batch_dims=1)  # (B, V, V)
        logits = tf.gather(table, tokens, batch_dims=1)
        at_t = tf.equal(tf.range(tf.shape(history)[1]), t)
        return logits, {"history": tf.where(at_t, tokens[:, None], history)}


def _markov_log_prob(log_p):
    """log p(next | tokens so far) of `_MarkovSteps` with log-softmaxed table ``log_p``."""
    return lambda prefix: log_p[prefix[-1]]


def _history_log_prob(log_p):
    return lambda prefix: log_p[prefix[-2] if len(prefix) > 1 else START_ID, prefix[-1]]


def _all_sequences(next_log_prob, max_length):
    """Every output a decoder can give: ``(ids padded to max_length, log p, |Y|)``.

    A sequence ends at its first [END] or after ``max_length`` tokens.
    """
    out = []

    def extend(prefix, log_p):
        if len(prefix) > 1 and (prefix[-1] == END_ID or len(prefix) == max_length + 1):
            ids = prefix[1:]
            out.append((ids + [PAD_ID] * (max_length - len(ids)), log_p, len(ids)))
            return
        step = next_log_prob(prefix)
        for token in range(len(step)):
            extend(prefix + [token], log_p + step[token])

    extend([START_ID], 0.0)
    return out


def _brute_force_best(next_log_prob, max_length, alpha):
    """``(ids, log p)`` maximising log p / ((5 + |Y|) / 6)^α over every sequence."""
    ids, log_p, _ = max(
        _all_sequences(next_log_prob, max_length),
        key=lambda s: s[1] / ((5 + s[2]) / 6) ** alpha,
    )
    return ids, log_p


def _random_logits(seed, shape):
    return np.random.default_rng(seed).normal(0.0, 2.0, size=shape).astype("float32")


# (a) beam_width=1 is greedy decoding.


@pytest.mark.parametrize("max_length", [1, 3, 5])
@pytest.mark.parametrize("steps_class, order", [(_MarkovSteps, 2), (_HistorySteps, 3)])
def test_beam_width_one_equals_greedy_decode_steps(steps_class, order, max_length):
    logits = _random_logits(0, (4,) + (V,) * order)
    steps = steps_class(logits)
    inputs = np.arange(4, dtype="int32")
    greedy = np.asarray(decoding.greedy_decode_steps(steps, inputs, max_length))
    ids, log_probs = decoding.beam_search_steps(steps, inputs, max_length, beam_width=1)
    np.testing.assert_array_equal(ids, greedy)
    # The score is log p of the greedy output, summed in NumPy up to [END].
    next_log_prob = _markov_log_prob if order == 2 else _history_log_prob
    for b, row in enumerate(greedy):
        step = next_log_prob(_log_softmax(logits[b]))
        prefix, expected = [START_ID], 0.0
        for token in row:
            expected += step(prefix)[token]
            prefix.append(int(token))
            if token == END_ID:
                break
        np.testing.assert_allclose(log_probs[b], expected, rtol=1e-5)


# (b) against exhaustive search.


@pytest.mark.parametrize("alpha", [0.0, 0.7, 3.0])
@pytest.mark.parametrize("seed", [1, 2])
def test_exhaustive_beam_equals_brute_force_best(seed, alpha):
    max_length = 4
    logits = _random_logits(seed, (3, V, V))
    # A likely [END] in example 0, so that sequences of every length compete.
    logits[0, :, END_ID] += 2.0
    ids, log_probs = decoding.beam_search_steps(
        _MarkovSteps(logits), np.arange(3, dtype="int32"), max_length,
        beam_width=V**max_length, length_penalty=alpha,
    )
    for b in range(3):
        best, best_log_p = _brute_force_best(_markov_log_prob(_log_softmax(logits[b])),
                                             max_length, alpha)
        assert list(np.asarray(ids[b])) == best
        np.testing.assert_allclose(log_probs[b], best_log_p, rtol=1e-5)


def _two_path_table():
    """A short answer (A [END]) more probable than a long one (B C D [END]).

    Eight ids (C = 6, D = 7); every other sequence is far less probable.
    """
    c, d = 6, 7
    p = np.full((8, 8), 1e-3)
    p[START_ID, [A, B]] = [0.8, 0.2]
    p[A, END_ID] = 0.9
    p[B, c] = p[c, d] = p[d, END_ID] = 0.97
    return np.log(p / p.sum(-1, keepdims=True)).astype("float32"), [B, c, d, END_ID]


def test_length_penalty_switches_to_the_longer_answer_where_the_formula_says():
    logits, long = _two_path_table()
    log_p = _log_softmax(logits)
    short = [A, END_ID, PAD_ID, PAD_ID]
    log_short = log_p[START_ID, A] + log_p[A, END_ID]
    log_long = sum(log_p[y0, y1] for y0, y1 in zip([START_ID] + long, long))
    assert log_short > log_long
    # log p_s / (7/6)^α = log p_l / (9/6)^α  <=>  α* = ln(log p_l / log p_s) / ln(9/7).
    alpha_star = math.log(log_long / log_short) / math.log(9 / 7)
    steps = _MarkovSteps(logits[None])
    for alpha, expected in [(0.0, short), (alpha_star - 0.05, short), (alpha_star + 0.05, long)]:
        best, _ = _brute_force_best(_markov_log_prob(log_p), 4, alpha)
        assert best == expected, alpha  # the table does what the formula predicts
        for beam_width in (2, 8**4):
            ids, log_probs = decoding.beam_search_steps(
                steps, np.zeros(1, "int32"), 4, beam_width=beam_width, length_penalty=alpha
            )
            assert list(np.asarray(ids[0])) == expected, (alpha, beam_width)
            # The returned score is log p, without the penalty.
            np.testing.assert_allclose(
                log_probs[0], log_short if expected == short else log_long, rtol=1e-5
            )


# (c) the state follows its beam.


@pytest.mark.parametrize("beam_width", [2, 3, V**4])
def test_state_is_gathered_by_parent_beam(beam_width):
    max_length, batch = 4, 8
    logits = _random_logits(3, (batch, V, V, V))
    logits[:, :, :, END_ID] += 1.0
    ids, log_probs = decoding.beam_search_steps(
        _HistorySteps(logits), np.arange(batch, dtype="int32"), max_length, beam_width=beam_width
    )
    for b in range(batch):
        log_p = _log_softmax(logits[b])
        sequences = {tuple(s): lp for s, lp, _ in _all_sequences(_history_log_prob(log_p),
                                                                  max_length)}
        # Whatever the width, the score is that of the returned sequence under
        # the second-order model: each beam read its own history.
        np.testing.assert_allclose(log_probs[b], sequences[tuple(np.asarray(ids[b]))],
                                   rtol=1e-5)
        if beam_width == V**max_length:
            assert max(sequences.values()) == pytest.approx(float(log_probs[b]), rel=1e-5)


def test_examples_of_a_batch_are_searched_independently():
    # Row b * k + j is beam j of example b: decoding a batch equals decoding
    # each example alone (constants tiled, state gathered within the example).
    logits = _random_logits(4, (3, V, V, V))
    steps = _HistorySteps(logits)
    inputs = np.array([2, 0, 1], "int32")
    ids, log_probs = decoding.beam_search_steps(steps, inputs, 5, beam_width=3,
                                                length_penalty=0.5)
    for b in range(len(inputs)):
        alone_ids, alone_log_probs = decoding.beam_search_steps(
            steps, inputs[b : b + 1], 5, beam_width=3, length_penalty=0.5
        )
        np.testing.assert_array_equal(alone_ids[0], ids[b])
        np.testing.assert_allclose(alone_log_probs[0], log_probs[b], rtol=1e-6)


def test_empty_batch_and_tf_function():
    steps = _HistorySteps(_random_logits(5, (2, V, V, V)))
    ids, log_probs = decoding.beam_search_steps(steps, np.zeros(0, "int32"), 3, beam_width=2)
    assert ids.shape == (0, 3) and log_probs.shape == (0,)
    search = tf.function(
        lambda x: decoding.beam_search_steps(steps, x, 4, beam_width=3),
        input_signature=[tf.TensorSpec([None], tf.int32)],
    )
    inputs = np.array([1, 0], "int32")
    eager = decoding.beam_search_steps(steps, inputs, 4, beam_width=3)
    for got, expected in zip(search(inputs), eager):
        np.testing.assert_array_equal(got, expected)


# (d) the seq2seq models: beam_search is beam_search_steps on decoder_steps.


@pytest.fixture(scope="module")
def seq2seq_models():
    keras.utils.set_random_seed(7)
    return {
        "rnn": models.rnn_seq2seq(12, 12, units=16, embedding_dim=8),
        "transformer": models.transformer_seq2seq(12, 12, num_layers=2, model_dim=16,
                                                  num_heads=2, intermediate_dim=32),
    }


@pytest.mark.parametrize("alpha", [0.0, 1.0])
@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_seq2seq_model_equals_beam_search(kind, alpha, seq2seq_models):
    model = seq2seq_models[kind]
    source = np.random.default_rng(0).integers(4, 12, size=(3, 6)).astype("int32")
    source[1, 3:] = PAD_ID
    ids, log_probs = decoding.beam_search_steps(
        decoding.decoder_steps(model), source, 6, beam_width=3, length_penalty=alpha
    )
    expected_ids, expected_log_probs = decoding.beam_search(
        model, source, 6, beam_width=3, length_penalty=alpha
    )
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(log_probs, expected_log_probs, rtol=1e-6)
    np.testing.assert_allclose(
        log_probs, decoding.sequence_log_probability(model, source, ids), atol=1e-4
    )


# (e) bad arguments.


class _StartOnly:
    def start(self, inputs, max_length):
        return {}, {}


class _ScalarState:
    def start(self, inputs, max_length):
        return {}, {"t": tf.constant(0)}

    def step(self, tokens, t, constants, state):
        return tf.zeros([tf.shape(tokens)[0], V]), {"t": state["t"] + 1}


@pytest.mark.parametrize(
    "arguments, error, match",
    [
        ({"beam_width": 0}, ValueError, "invalid value for argument `beam_width`"),
        ({"beam_width": True}, TypeError, "invalid type for argument `beam_width`"),
        ({"beam_width": 2.5}, ValueError, "invalid value for argument `beam_width`"),
        ({"max_length": 0}, ValueError, "invalid value for argument `max_length`"),
        ({"length_penalty": -0.5}, ValueError, "invalid value for argument `length_penalty`"),
        ({"length_penalty": "1"}, TypeError, "invalid type for argument `length_penalty`"),
        ({"steps": object()}, TypeError, "invalid type for argument `steps`.*`start`"),
        ({"steps": _StartOnly()}, TypeError, "invalid type for argument `steps`.*`step`"),
        ({"inputs": np.int32(1)}, ValueError, "invalid shape for argument `inputs`"),
        ({"steps": _ScalarState()}, ValueError,
         r"invalid shape for argument `steps`: expected state .* batch axis"),
    ],
)
def test_bad_arguments_raise_errors_naming_the_argument(arguments, error, match):
    kwargs = {"steps": _MarkovSteps(_random_logits(0, (2, V, V))),
              "inputs": np.array([0, 1], "int32"), "max_length": 3, "beam_width": 2}
    kwargs.update(arguments)
    with pytest.raises(error, match="^beam_search_steps: " + match):
        decoding.beam_search_steps(**kwargs)
