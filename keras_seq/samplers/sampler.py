"""`Sampler`: how the next token is chosen, and the decoding loop that asks it."""

from __future__ import annotations

from collections.abc import Sequence

from keras_seq._backend import require_tensorflow
from keras_seq._validation import check_float, check_int, invalid_type
from keras_seq.reserved_tokens import END_ID, PAD_ID, START_ID

__all__ = ["NEG_INF", "Sampler", "write_column"]

NEG_INF = -1e9
"""A finite minus infinity for logits, so that -inf - -inf never turns into NaN."""


def write_column(buffer, t, values):
    """buffer[..., t] = values, as a select so it lowers to simple ops."""
    import tensorflow as tf

    at_t = tf.equal(tf.range(tf.shape(buffer)[-1]), t)
    return tf.where(at_t, values[..., None], buffer)


class Sampler:
    """Chooses each next token from a model's logits, one step at a time (KerasHub's samplers).

    A sampler drives any object with the ``start`` and ``step`` methods of
    `keras_seq.decoding.DecoderSteps` (what a task's cached step gives:
    `keras_seq.decoding.decoder_steps`, `keras_seq.decoding.language_model_steps`)
    in one `tf.while_loop` over a fixed ``(B, max_length)`` buffer, so that it
    runs inside a `tf.function` and a SavedModel. Each step feeds the last
    token and chooses the next one with `get_next_token`; a row stops at
    ``end_id`` (later columns are ``[PAD]``), and the loop stops once every
    row has. Subclasses say how a token is chosen (`GreedySampler`,
    `RandomSampler`, `TopKSampler`, `TopPSampler`), or search otherwise
    (`BeamSampler`).

    The first token fed is ``[START]`` at position 0, unless the steps say
    otherwise (``steps.first_tokens(inputs) -> (tokens (B,), t)``: a
    language model's last prompt token, at the position after the prompt).

    Args:
        temperature: float T > 0: the logits are divided by T before a
            random choice. Default 1.
        seed: int or None: with an int, the token at position k is drawn
            with the stateless seed ``(seed, k)``, so the same seed, inputs
            and weights give the same tokens; None draws afresh.
    """

    def __init__(self, temperature: float = 1.0, seed: int | None = None):
        where = type(self).__name__
        self.temperature = check_float(where, "temperature", temperature, low=0.0,
                                       low_inclusive=False)
        self.seed = check_int(where, "seed", seed, allow_none=True)

    # --- the choice ---

    def get_next_token(self, logits, seed):
        """The ``(B,)`` int32 tokens chosen from ``(B, V)`` float32 logits;
        ``seed`` is the stateless seed of this position (a ``(2,)`` tensor)."""
        raise NotImplementedError(f"{type(self).__name__} must define get_next_token.")

    # --- the loop ---

    def __call__(self, steps, inputs, max_length: int, start_id: int = START_ID,
                 end_id: int | None = END_ID, suppress_ids: Sequence[int] = (),
                 return_logits: bool = False):
        """Decodes ``max_length`` tokens (or until every row has produced ``end_id``).

        Args:
            steps: a `keras_seq.decoding.DecoderSteps`.
            inputs: what ``steps.start`` reads (source ids, a prompt), batch first.
            max_length: int, columns of the output (``end_id`` included).
            start_id: the first token fed (unless ``steps.first_tokens``).
            end_id: the token that ends a row; None: rows never end early.
            suppress_ids: ids never chosen.
            return_logits: also return the ``(B, max_length, V)`` logits each
                token was chosen from, as the model gave them (before
                ``suppress_ids``; zeros after a row ends).

        Returns:
            ``(B, max_length)`` int32 ids, and the logits if asked.
        """
        require_tensorflow(f"keras_seq.samplers.{type(self).__name__}")
        import tensorflow as tf

        constants, state, tokens, t0 = self._start(steps, inputs, max_length, start_id)
        batch_size = tf.shape(tokens)[0]
        never = self._never_ids(suppress_ids)
        seed = (tf.cast(self.seed, tf.int32) if self.seed is not None else
                tf.random.uniform([], maxval=tf.int32.max, dtype=tf.int32))
        ids = tf.zeros([batch_size, max_length], tf.int32)
        finished = tf.zeros([batch_size], tf.bool)
        logits_buffer = None

        def cond(i, tokens, finished, ids, state, *logits_buffer):
            return tf.logical_and(i < max_length, tf.logical_not(tf.reduce_all(finished)))

        def body(i, tokens, finished, ids, state, *logits_buffer):
            t = t0 + i
            logits, state = steps.step(tokens, t, constants, state)
            logits = tf.cast(logits, tf.float32)
            tokens = self.get_next_token(self._suppressed(logits, never), tf.stack([seed, t + 1]))
            tokens = tf.where(finished, tf.constant(PAD_ID, tf.int32), tokens)
            ids = write_column(ids, i, tokens)
            if end_id is not None:
                finished = tf.logical_or(finished, tf.equal(tokens, end_id))
            extra = ()
            if logits_buffer:
                at = tf.equal(tf.range(max_length), i)[None, :, None]
                extra = (tf.where(at, logits[:, None, :], logits_buffer[0]),)
            return (i + 1, tokens, finished, ids, state, *extra)

        loop_vars = (tf.constant(0), tokens, finished, ids, state)
        if return_logits:
            vocabulary = getattr(steps, "vocabulary_size", None)
            if vocabulary is None:
                raise invalid_type(type(self).__name__, "steps", "steps with a "
                                   "`vocabulary_size` (the logits' width), to return the logits",
                                   steps)
            logits_buffer = tf.zeros([batch_size, max_length, vocabulary], tf.float32)
            loop_vars += (logits_buffer,)
        _, _, _, ids, _, *rest = tf.while_loop(cond, body, loop_vars)
        return (ids, rest[0]) if return_logits else ids

    # --- shared by the loops ---

    @staticmethod
    def _start(steps, inputs, max_length, start_id):
        """``(constants, state, first tokens (B,), first position)``: the
        steps' start, and what they feed first (``steps.first_tokens``), or
        ``start_id`` at position 0."""
        import tensorflow as tf

        constants, state = steps.start(inputs, max_length)
        first = getattr(steps, "first_tokens", None)
        if first is not None:
            return (constants, state, *first(inputs))
        batch_size = tf.shape(tf.convert_to_tensor(inputs))[0]
        return (constants, state, tf.fill([batch_size], tf.constant(start_id, tf.int32)),
                tf.constant(0))

    @staticmethod
    def _never_ids(suppress_ids) -> list[int]:
        if isinstance(suppress_ids, (str, bytes)):
            raise invalid_type("Sampler", "suppress_ids", "a sequence of token ids",
                               suppress_ids)
        return sorted({check_int("Sampler", "suppress_ids", i, minimum=0) for i in suppress_ids})

    @staticmethod
    def _suppressed(logits, never):
        """``logits`` with the ids ``never`` at `NEG_INF`."""
        if not never:
            return logits
        import tensorflow as tf

        excluded = tf.reduce_any(
            tf.equal(tf.range(tf.shape(logits)[-1])[:, None], tf.constant(never)[None, :]),
            axis=-1)
        return tf.where(excluded, NEG_INF, logits)
