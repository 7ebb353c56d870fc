"""`BeamSampler`: beam search, the most probable continuations kept at each step."""

from __future__ import annotations

from collections.abc import Sequence

from keras_seq._backend import require_tensorflow
from keras_seq._validation import check_float, check_positive_int, shape_error
from keras_seq.reserved_tokens import END_ID, PAD_ID, START_ID
from keras_seq.samplers.sampler import NEG_INF, Sampler, write_column

__all__ = ["BeamSampler"]


class BeamSampler(Sampler):
    """Beam search: keeps the ``num_beams`` most probable prefixes per example at each step.

    Each step extends every live beam by every token and keeps the k best
    sums of log-probabilities; a beam that produced the end token is carried
    on unchanged (extended by ``[PAD]`` at no cost). The answer is the beam
    maximising log p(Y|x) / lp(Y), with the GNMT length penalty
    lp(Y) = ((5 + |Y|) / 6)^α, |Y| counting the tokens up to and including
    the end token (α = 0: plain log-probability; α > 0 favours longer
    outputs). ``num_beams=1`` is greedy decoding.

    Every tensor of the steps' ``constants`` and ``state`` must have the
    batch axis first: the constants are repeated once to ``B * num_beams``
    rows (example b's beams are rows ``b * num_beams ... b * num_beams +
    num_beams - 1``) and, after each step, the state's rows are gathered
    from the beams each kept prefix extends.

    Args:
        num_beams: int ≥ 1, beams kept per example.
        length_penalty: float α ≥ 0. Default 0.

    References:
        Wu et al. Google's Neural Machine Translation System. arXiv:1609.08144, 2016.
    """

    def __init__(self, num_beams: int, length_penalty: float = 0.0):
        super().__init__()
        self.num_beams = check_positive_int("BeamSampler", "num_beams", num_beams)
        self.length_penalty = check_float("BeamSampler", "length_penalty", length_penalty,
                                          low=0.0)

    def __call__(self, steps, inputs, max_length: int, start_id: int = START_ID,
                 end_id: int | None = END_ID, suppress_ids: Sequence[int] = (),
                 return_logits: bool = False):
        """The best beam's ``(B, max_length)`` ids (see `search` for its log-probability)."""
        if return_logits:
            from keras_seq._validation import invalid_value

            raise invalid_value("BeamSampler", "return_logits", "False (a beam's tokens are "
                                "chosen from several rows' logits)", return_logits)
        return self.search(steps, inputs, max_length, start_id, end_id, suppress_ids)[0]

    def search(self, steps, inputs, max_length: int, start_id: int = START_ID,
               end_id: int | None = END_ID, suppress_ids: Sequence[int] = (),
               where: str = "BeamSampler"):
        """``(ids, log_probs)``: the best beam's ``(B, max_length)`` int32 ids,
        laid out as a greedy decoding's, and its ``(B,)`` float32 log p(ids | x)
        (the sum of the log-softmax of the step logits, without the length penalty).
        ``where``: the function an error about ``steps`` names."""
        require_tensorflow("keras_seq.samplers.BeamSampler")
        import tensorflow as tf

        k = self.num_beams
        constants, state, tokens, t0 = self._start(steps, inputs, max_length, start_id)
        _check_batch_major(where, tokens, constants, state)
        batch_size = tf.shape(tokens)[0]
        never = self._never_ids(suppress_ids)
        # Beams of one example sit next to each other: row b * k + j.
        tile = lambda x: tf.repeat(x, k, axis=0)  # noqa: E731
        constants = tf.nest.map_structure(tile, constants)
        state = tf.nest.map_structure(tile, state)
        tokens = tile(tokens)

        # Only beam 0 is alive at first, so the k beams do not start as copies.
        log_probs = tf.tile(
            tf.concat([[0.0], tf.fill([k - 1], NEG_INF)], axis=0)[None, :], [batch_size, 1]
        )  # (B, k)
        ids = tf.zeros([batch_size, k, max_length], tf.int32)
        finished = tf.zeros([batch_size, k], tf.bool)

        def cond(i, tokens, log_probs, finished, ids, state):
            return tf.logical_and(i < max_length, tf.logical_not(tf.reduce_all(finished)))

        def body(i, tokens, log_probs, finished, ids, state):
            # The batch size is read from a loop variable, not captured from
            # outside: inside the loop's graph a captured shape has no static
            # value, and the loop variables would come out of the body less
            # static than they went in (a fixed-shape batch could not trace).
            batch_size = tf.shape(log_probs)[0]
            logits, state = steps.step(tokens, t0 + i, constants, state)
            logits = tf.cast(logits, tf.float32)
            logits = self._suppressed(logits, never)
            vocabulary_size = tf.shape(logits)[-1]
            step_log_probs = tf.nn.log_softmax(logits)
            step_log_probs = tf.reshape(step_log_probs, [batch_size, k, vocabulary_size])
            # A finished beam may only be extended by PAD, at no cost.
            pad_only = tf.where(tf.equal(tf.range(vocabulary_size), PAD_ID), 0.0, NEG_INF)
            step_log_probs = tf.where(finished[:, :, None], pad_only, step_log_probs)
            scores = tf.reshape(log_probs[:, :, None] + step_log_probs, [batch_size, -1])
            log_probs, flat = tf.math.top_k(scores, k)  # (B, k)
            beam = flat // vocabulary_size
            tokens = flat % vocabulary_size
            ids = write_column(tf.gather(ids, beam, batch_dims=1), i, tokens)
            finished = tf.gather(finished, beam, batch_dims=1)
            if end_id is not None:
                finished = tf.logical_or(finished, tf.equal(tokens, end_id))
            rows = tf.reshape(beam + k * tf.range(batch_size)[:, None], [-1])
            state = tf.nest.map_structure(lambda x: tf.gather(x, rows), state)
            return i + 1, tf.reshape(tokens, [-1]), log_probs, finished, ids, state

        _, _, log_probs, _, ids, _ = tf.while_loop(
            cond, body, (tf.constant(0), tokens, log_probs, finished, ids, state)
        )
        lengths = sequence_lengths(ids, end_id)
        normalized = log_probs / _length_penalty(lengths, self.length_penalty)
        best = tf.argmax(normalized, axis=-1, output_type=tf.int32)
        return tf.gather(ids, best, batch_dims=1), tf.gather(log_probs, best, batch_dims=1)


def _length_penalty(lengths, alpha):
    """GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^α (Wu et al., 2016)."""
    import tensorflow as tf

    return tf.pow((5.0 + tf.cast(lengths, tf.float32)) / 6.0, alpha)


def sequence_lengths(ids, end_id):
    """Tokens up to and including the first ``end_id``; the whole buffer if none
    (or when ``end_id`` is None)."""
    import tensorflow as tf

    max_length = tf.shape(ids)[-1]
    if end_id is None:
        return tf.fill(tf.shape(ids)[:-1], max_length)
    is_end = tf.equal(ids, end_id)
    first_end = tf.argmax(tf.cast(is_end, tf.int32), axis=-1, output_type=tf.int32)
    return tf.where(tf.reduce_any(is_end, axis=-1), first_end + 1, max_length)


def _check_batch_major(where, tokens, constants, state):
    """Every tensor of ``constants`` and ``state`` must have a batch axis first:
    the search tiles and gathers along it."""
    import tensorflow as tf

    batch_size = tokens.shape[0]
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
