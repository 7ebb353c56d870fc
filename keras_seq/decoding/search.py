"""Greedy decoding and beam search of `DecoderSteps`, and `sequence_log_probability`.

The loops are the samplers' (`keras_seq.samplers.GreedySampler`,
`keras_seq.samplers.BeamSampler`): one `tf.while_loop` over a fixed
``(B, max_length)`` buffer. `greedy_decode` and `beam_search` run them on a
translator's own step (`decoder_steps`), `greedy_decode_steps` and
`beam_search_steps` on any `DecoderSteps`; these functions only check their
arguments.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_seq._backend import require_tensorflow
from keras_seq._validation import check_float, check_positive_int, invalid_type, shape_error
from keras_seq.decoding.steps import DecoderSteps, decoder_steps
from keras_seq.reserved_tokens import END_ID, START_ID
from keras_seq.samplers import BeamSampler, GreedySampler
from keras_seq.samplers.beam_sampler import sequence_lengths
from keras_seq.samplers.sampler import NEG_INF, write_column

__all__ = [
    "NEG_INF",
    "beam_search",
    "beam_search_steps",
    "greedy_decode",
    "greedy_decode_steps",
    "sequence_log_probability",
    "write_column",
]


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
    return GreedySampler()(decoder_steps(model), encoder_inputs, max_length, start_id, end_id)


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
    return GreedySampler()(steps, inputs, max_length, start_id, end_id)


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
    It is `keras_seq.samplers.BeamSampler` on ``decoder_steps(model)`` (one search loop).

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
    return BeamSampler(beam_width, length_penalty).search(
        decoder_steps(model), encoder_inputs, max_length, start_id, end_id)


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
    return BeamSampler(beam_width, length_penalty).search(steps, inputs, max_length, start_id,
                                                          end_id, where=where)


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
    counted = positions < sequence_lengths(output_ids, end_id)[:, None]
    return tf.reduce_sum(tf.where(counted, token_log_probs, 0.0), axis=-1)
