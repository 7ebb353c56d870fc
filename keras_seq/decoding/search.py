"""Greedy decoding and beam search of `DecoderSteps`, in one `tf.while_loop`
over a fixed ``(B, max_length)`` buffer, and `sequence_log_probability`.

One loop per search (`_greedy`, `_beam_search`) serves both the seq2seq
models (`greedy_decode`, `beam_search`) and any `DecoderSteps`
(`greedy_decode_steps`, `beam_search_steps`); the public functions only
check their arguments and pick the steps."""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_seq._backend import require_tensorflow
from keras_seq._validation import check_float, check_positive_int, invalid_type, shape_error
from keras_seq.decoding.steps import DecoderSteps, decoder_steps
from keras_seq.reserved_tokens import END_ID, PAD_ID, START_ID

__all__ = [
    "NEG_INF",
    "beam_search",
    "beam_search_steps",
    "greedy_decode",
    "greedy_decode_steps",
    "sequence_log_probability",
    "write_column",
]

NEG_INF = -1e9
"""A finite minus infinity for logits, so that -inf - -inf never turns into NaN."""


def write_column(buffer, t, values):
    """buffer[..., t] = values, as a select so it lowers to simple ops."""
    at_t = tf.equal(tf.range(tf.shape(buffer)[-1]), t)
    return tf.where(at_t, values[..., None], buffer)



def _check_decode_args(where, encoder_inputs, max_length):
    """``(encoder_inputs as int32, max_length as int)``, or the error naming the bad one."""
    max_length = check_positive_int(where, "max_length", max_length)
    encoder_inputs = tf.convert_to_tensor(encoder_inputs)
    if not encoder_inputs.dtype.is_integer:
        raise invalid_type(
            where, "encoder_inputs", "integer token ids",
            f"a tensor of dtype {encoder_inputs.dtype.name}",
        )
    if encoder_inputs.shape.rank != 2:
        raise shape_error(where, "encoder_inputs", "(batch, length)", encoder_inputs.shape)
    return tf.cast(encoder_inputs, "int32"), max_length


def _check_steps_args(where, steps, inputs, max_length):
    """``(inputs as a tensor, max_length as int)`` after checking ``steps`` too."""
    for method in ("start", "step"):
        if not callable(getattr(steps, method, None)):
            raise invalid_type(
                where, "steps",
                "an object with the start and step methods of keras_seq.decoding.DecoderSteps "
                f"(it has no callable `{method}`)",
                steps,
            )
    max_length = check_positive_int(where, "max_length", max_length)
    inputs = tf.convert_to_tensor(inputs)
    if inputs.shape.rank == 0:
        raise shape_error(where, "inputs", "(batch, ...)", inputs.shape)
    return inputs, max_length


def _greedy(steps, encoder_inputs, max_length, start_id, end_id):
    batch_size = tf.shape(encoder_inputs)[0]
    constants, state = steps.start(encoder_inputs, max_length)
    ids = tf.zeros([batch_size, max_length], tf.int32)
    tokens = tf.fill([batch_size], tf.constant(start_id, tf.int32))
    finished = tf.zeros([batch_size], tf.bool)

    def cond(t, tokens, finished, ids, state):
        return tf.logical_and(t < max_length, tf.logical_not(tf.reduce_all(finished)))

    def body(t, tokens, finished, ids, state):
        logits, state = steps.step(tokens, t, constants, state)
        tokens = tf.argmax(logits, axis=-1, output_type=tf.int32)
        tokens = tf.where(finished, tf.constant(PAD_ID, tf.int32), tokens)
        ids = write_column(ids, t, tokens)
        finished = tf.logical_or(finished, tf.equal(tokens, end_id))
        return t + 1, tokens, finished, ids, state

    _, _, _, ids, _ = tf.while_loop(
        cond, body, (tf.constant(0), tokens, finished, ids, state)
    )
    return ids


def greedy_decode(
    model: keras.Model,
    encoder_inputs,
    max_length: int,
    start_id: int = START_ID,
    end_id: int = END_ID,
) -> tf.Tensor:
    """Greedy decoding: y_i = argmax_y p(y | y_<i, x), until ``[END]``.

    Args:
        model: a model built by `models.rnn_seq2seq` or
            `models.transformer_seq2seq`.
        encoder_inputs: ``(B, S)`` int source ids, 0-padded (rows may have
            different lengths). ``B`` may be 0.
        max_length: int, size of the output buffer (``[END]`` included).
        start_id: id fed as y_0. Default ``[START]``.
        end_id: id that ends a sequence. Default ``[END]``.

    Returns:
        ``(B, max_length)`` int32 ids; each row holds its tokens up to and
        including ``[END]``, then ``[PAD]`` (0).
    """
    require_tensorflow("keras_seq.decoding.greedy_decode")
    encoder_inputs, max_length = _check_decode_args("greedy_decode", encoder_inputs, max_length)
    return _greedy(decoder_steps(model), encoder_inputs, max_length, start_id, end_id)


def greedy_decode_steps(
    steps: DecoderSteps,
    inputs,
    max_length: int,
    start_id: int = START_ID,
    end_id: int = END_ID,
) -> tf.Tensor:
    """`greedy_decode` for any `DecoderSteps`, e.g. a model with an image encoder.

    The loop of `greedy_decode`, driving ``steps`` (an object with the
    ``start`` and ``step`` methods of `DecoderSteps`) instead of a model made
    by the seq2seq builders. ``inputs`` go to ``steps.start`` unchanged, so
    they may be anything with a leading batch axis (images for a captioning
    model); only their batch size is read here.

    Args:
        steps: the one-step view of the model.
        inputs: a tensor ``(B, ...)``, what ``steps.start`` encodes.
        max_length: int, size of the output buffer (``[END]`` included).
        start_id: id fed as y_0. Default ``[START]``.
        end_id: id that ends a sequence. Default ``[END]``.

    Returns:
        ``(B, max_length)`` int32 ids laid out as in `greedy_decode`.
    """
    require_tensorflow("keras_seq.decoding.greedy_decode_steps")
    inputs, max_length = _check_steps_args("greedy_decode_steps", steps, inputs, max_length)
    return _greedy(steps, inputs, max_length, start_id, end_id)


def _length_penalty(lengths, alpha):
    """GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^α (Wu et al., 2016)."""
    return tf.pow((5.0 + tf.cast(lengths, tf.float32)) / 6.0, alpha)


def _sequence_lengths(ids, end_id):
    """Tokens up to and including the first END; the whole buffer if none."""
    max_length = tf.shape(ids)[-1]
    is_end = tf.equal(ids, end_id)
    first_end = tf.argmax(tf.cast(is_end, tf.int32), axis=-1, output_type=tf.int32)
    return tf.where(tf.reduce_any(is_end, axis=-1), first_end + 1, max_length)


def _check_batch_major(where, inputs, constants, state):
    """Every tensor of ``constants`` and ``state`` must have a batch axis first:
    the search tiles and gathers along it."""
    batch_size = inputs.shape[0]
    for kind, nest in (("constants", constants), ("state", state)):
        for x in tf.nest.flatten(nest):
            shape = tf.convert_to_tensor(x).shape
            if shape.rank == 0 or (
                shape.rank is not None and None not in (shape[0], batch_size)
                and shape[0] != batch_size
            ):
                raise shape_error(
                    where, "steps",
                    f"{kind} from steps.start with the batch axis (size {batch_size}) first "
                    "in every tensor",
                    shape,
                )


def _beam_search(
    steps, encoder_inputs, max_length, beam_width, length_penalty, start_id, end_id,
    where="beam_search_steps",
):
    batch_size = tf.shape(encoder_inputs)[0]
    k = beam_width
    constants, state = steps.start(encoder_inputs, max_length)
    _check_batch_major(where, encoder_inputs, constants, state)
    # Beams of one example sit next to each other: row b * k + j.
    tile = lambda x: tf.repeat(x, k, axis=0)  # noqa: E731
    constants = tf.nest.map_structure(tile, constants)
    state = tf.nest.map_structure(tile, state)

    # Only beam 0 is alive at first, so the k beams do not start as copies.
    log_probs = tf.tile(
        tf.concat([[0.0], tf.fill([k - 1], NEG_INF)], axis=0)[None, :], [batch_size, 1]
    )  # (B, k)
    ids = tf.zeros([batch_size, k, max_length], tf.int32)
    finished = tf.zeros([batch_size, k], tf.bool)
    tokens = tf.fill([batch_size * k], tf.constant(start_id, tf.int32))

    def cond(t, tokens, log_probs, finished, ids, state):
        return tf.logical_and(t < max_length, tf.logical_not(tf.reduce_all(finished)))

    def body(t, tokens, log_probs, finished, ids, state):
        # The batch size is read from a loop variable, not captured from
        # outside: inside the loop's graph a captured shape has no static
        # value, and the loop variables would come out of the body less
        # static than they went in (a fixed-shape batch could not trace).
        batch_size = tf.shape(log_probs)[0]
        logits, state = steps.step(tokens, t, constants, state)
        vocabulary_size = tf.shape(logits)[-1]
        step_log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))
        step_log_probs = tf.reshape(step_log_probs, [batch_size, k, vocabulary_size])
        # A finished beam may only be extended by PAD, at no cost.
        pad_only = tf.where(tf.equal(tf.range(vocabulary_size), PAD_ID), 0.0, NEG_INF)
        step_log_probs = tf.where(finished[:, :, None], pad_only, step_log_probs)
        scores = tf.reshape(log_probs[:, :, None] + step_log_probs, [batch_size, -1])
        log_probs, flat = tf.math.top_k(scores, k)  # (B, k)
        beam = flat // vocabulary_size
        tokens = flat % vocabulary_size
        ids = write_column(tf.gather(ids, beam, batch_dims=1), t, tokens)
        finished = tf.logical_or(
            tf.gather(finished, beam, batch_dims=1), tf.equal(tokens, end_id)
        )
        rows = tf.reshape(beam + k * tf.range(batch_size)[:, None], [-1])
        state = tf.nest.map_structure(lambda x: tf.gather(x, rows), state)
        return t + 1, tf.reshape(tokens, [-1]), log_probs, finished, ids, state

    _, _, log_probs, _, ids, _ = tf.while_loop(
        cond, body, (tf.constant(0), tokens, log_probs, finished, ids, state)
    )
    normalized = log_probs / _length_penalty(_sequence_lengths(ids, end_id), length_penalty)
    best = tf.argmax(normalized, axis=-1, output_type=tf.int32)
    return tf.gather(ids, best, batch_dims=1), tf.gather(log_probs, best, batch_dims=1)


def beam_search(
    model: keras.Model,
    encoder_inputs,
    max_length: int,
    beam_width: int = 4,
    length_penalty: float = 0.0,
    start_id: int = START_ID,
    end_id: int = END_ID,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Beam search: keeps the ``beam_width`` most probable prefixes per step.

    Each step extends every live beam by every token and keeps the k best
    sums of log-probabilities; a beam that produced ``[END]`` is carried on
    unchanged. The answer is the beam maximising log p(Y|x) / lp(Y), with the
    GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^α (α = 0: plain log-probability;
    α > 0 favours longer outputs). ``beam_width=1`` is greedy decoding.
    It is `beam_search_steps` on ``decoder_steps(model)`` (one search loop).

    Args:
        model: a model built by `models.rnn_seq2seq` or
            `models.transformer_seq2seq`.
        encoder_inputs: ``(B, S)`` int source ids, 0-padded. ``B`` may be 0.
        max_length: int, size of the output buffer (``[END]`` included).
        beam_width: int, beams kept per example. Default 4.
        length_penalty: float α ≥ 0. Default 0.
        start_id: id fed as y_0. Default ``[START]``.
        end_id: id that ends a sequence. Default ``[END]``.

    Returns:
        ``(ids, log_probs)``: ``(B, max_length)`` int32 ids laid out as in
        `greedy_decode`, and ``(B,)`` float32 log p(ids | x).

    References:
        Wu et al. Google's Neural Machine Translation System. arXiv:1609.08144, 2016.
    """
    require_tensorflow("keras_seq.decoding.beam_search")
    beam_width = check_positive_int("beam_search", "beam_width", beam_width)
    length_penalty = check_float("beam_search", "length_penalty", length_penalty, low=0.0)
    encoder_inputs, max_length = _check_decode_args("beam_search", encoder_inputs, max_length)
    return _beam_search(
        decoder_steps(model),
        encoder_inputs,
        max_length,
        beam_width,
        length_penalty,
        start_id,
        end_id,
        "beam_search",
    )


def beam_search_steps(
    steps: DecoderSteps,
    inputs,
    max_length: int,
    beam_width: int,
    length_penalty: float = 0.0,
    start_id: int = START_ID,
    end_id: int = END_ID,
) -> tuple[tf.Tensor, tf.Tensor]:
    """`beam_search` for any `DecoderSteps`, e.g. a model with an image encoder.

    The search of `beam_search` (the same loop; `beam_search(model, ...)` is
    this function on `decoder_steps(model)`), driving ``steps``: an object
    with the ``start`` and ``step`` methods of `DecoderSteps`. ``inputs`` go
    to ``steps.start`` unchanged. Every tensor of the ``constants`` and
    ``state`` it returns (any nest) must have the batch axis first: the
    constants are repeated once to ``B * beam_width`` rows (the beams of
    example b are rows ``b * beam_width ... b * beam_width + beam_width - 1``),
    and after every step the state's rows are gathered from the beams each
    kept prefix extends.

    The answer is the beam maximising log p(Y|x) / lp(Y), with the GNMT
    length penalty lp(Y) = ((5 + |Y|) / 6)^α of `beam_search`, |Y| counting
    the tokens up to and including ``[END]`` (all ``max_length`` if there is
    none). ``beam_width=1`` is `greedy_decode_steps`.

    Args:
        steps: the one-step view of the model.
        inputs: a tensor ``(B, ...)``, what ``steps.start`` encodes. ``B`` may be 0.
        max_length: int, size of the output buffer (``[END]`` included).
        beam_width: int ≥ 1, beams kept per example.
        length_penalty: float α ≥ 0. Default 0 (plain log-probability).
        start_id: id fed as y_0. Default ``[START]``.
        end_id: id that ends a sequence. Default ``[END]``.

    Returns:
        ``(ids, log_probs)``: ``(B, max_length)`` int32 ids of the best beam,
        laid out as in `greedy_decode` (tokens up to and including
        ``[END]``, then ``[PAD]``), and ``(B,)`` float32 log p(ids | x), the
        sum of the log-softmax of the step logits (without the length
        penalty), as `beam_search` returns.

    Raises:
        TypeError: ``steps`` lacks ``start`` or ``step``; an argument of the
            wrong type.
        ValueError: ``max_length`` or ``beam_width`` below 1, a negative
            ``length_penalty``, a scalar ``inputs``, or constants or state
            without a leading batch axis.

    Examples:
        >>> import tensorflow as tf
        >>> from keras_seq import models, decoding
        >>> model = models.rnn_seq2seq(20, 12, units=8, embedding_dim=4)
        >>> ids, log_probs = decoding.beam_search_steps(
        ...     decoding.decoder_steps(model), tf.constant([[5, 6, 7]]), max_length=4, beam_width=3
        ... )
        >>> tuple(ids.shape), tuple(log_probs.shape)
        ((1, 4), (1,))

    References:
        Wu et al. Google's Neural Machine Translation System. arXiv:1609.08144, 2016.
    """
    require_tensorflow("keras_seq.decoding.beam_search_steps")
    where = "beam_search_steps"
    beam_width = check_positive_int(where, "beam_width", beam_width)
    length_penalty = check_float(where, "length_penalty", length_penalty, low=0.0)
    inputs, max_length = _check_steps_args(where, steps, inputs, max_length)
    return _beam_search(
        steps, inputs, max_length, beam_width, length_penalty, start_id, end_id, where
    )


def sequence_log_probability(
    model: keras.Model,
    encoder_inputs,
    output_ids,
    start_id: int = START_ID,
    end_id: int = END_ID,
) -> tf.Tensor:
    """log p(Y | x) of given outputs under the teacher-forced model.

    Sums log-probabilities of the tokens of each row of ``output_ids`` up to
    and including its first ``[END]`` (everything, if there is none), feeding
    ``[START] + Y`` to the whole model in one call (no decoding loop).

    Returns:
        ``(B,)`` float32.
    """
    require_tensorflow("keras_seq.decoding.sequence_log_probability")
    output_ids = tf.cast(output_ids, tf.int32)
    batch_size = tf.shape(output_ids)[0]
    decoder_inputs = tf.concat(
        [tf.fill([batch_size, 1], tf.constant(start_id, tf.int32)), output_ids[:, :-1]], axis=1
    )
    logits = model(
        {"encoder_inputs": tf.cast(encoder_inputs, tf.int32), "decoder_inputs": decoder_inputs},
        training=False,
    )
    token_log_probs = tf.gather(
        tf.nn.log_softmax(tf.cast(logits, tf.float32)), output_ids, batch_dims=2
    )
    positions = tf.range(tf.shape(output_ids)[1])[None, :]
    counted = positions < _sequence_lengths(output_ids, end_id)[:, None]
    return tf.reduce_sum(tf.where(counted, token_log_probs, 0.0), axis=-1)
