"""Sampling text from a language model (`sample`), in one `tf.while_loop`."""

from __future__ import annotations

from collections.abc import Sequence

import keras
import tensorflow as tf

from keras_seq._backend import require_tensorflow
from keras_seq._validation import check_float, check_positive_int, invalid_type, shape_error
from keras_seq.decoding.search import NEG_INF, write_column
from keras_seq.decoding.steps import RecurrentLanguageModelSteps, language_model_steps
from keras_seq.reserved_tokens import PAD_ID

__all__ = ["sample"]


def sample(
    model: keras.Model,
    prompt_ids,
    length: int,
    temperature: float = 1.0,
    seed: int | None = None,
    context: int | None = None,
    return_logits: bool = False,
    suppress_ids: Sequence[int] = (),
):
    """Samples ``length`` tokens after a prompt from a language model, in one loop.

    Token by token, y_i ~ softmax(z_i / T), where z_i are the logits of the
    model for the preceding tokens; ``temperature=0`` takes the argmax
    (greedy decoding). The padding id 0 is never drawn (the models read it
    as padding, not as a token), nor any id of ``suppress_ids``. Everything runs in one `tf.while_loop` over a fixed
    ``(B, P + length)`` buffer, one token per iteration: first the prompt's
    tokens are fed, then each sampled token. The Transformer reuses its
    key/value caches (`language_model_steps`), so each step costs one
    position, not the whole prefix.

    ``context`` (Transformer) bounds what the model sees to the positions it
    was trained on: a cache of ``W = context`` positions; when it is full,
    it restarts with the last ``W // 2`` tokens fed again, so each token is
    predicted from the tokens since the last restart, at least ``W // 2`` and
    at most ``W`` of them (fewer only at the start). Precisely: the token at
    position k (the prompt is positions 0 .. P − 1) is predicted from
    positions s .. k − 1 with s = 0 for k ≤ W, else
    s = d·⌊(k − 1 − W // 2) / d⌋ with d = W − W // 2. None: one cache for the
    whole sequence (a recurrent model always carries its state over the
    whole sequence and ignores ``context``).

    Args:
        model: a model built by `models.language_model`.
        prompt_ids: ``(B, P)`` int token ids, P ≥ 1, no padding.
        length: int ≥ 1, tokens to sample after the prompt.
        temperature: float T ≥ 0. Default 1 (the model's distribution).
        seed: int or None. With an int, the samples are a function of the
            seed, the prompt and the weights (stateless sampling, the
            token at position k drawn with the seed ``(seed, k)``); None draws a
            fresh seed.
        context: int ≥ 2 or None, the Transformer's window W (see above).
        return_logits: bool, also return the logits each token was drawn from.
        suppress_ids: further ids never drawn (e.g. the reserved tokens a
            character model never saw as targets).

    Returns:
        ``(B, length)`` int32 ids; with ``return_logits``, also the
        ``(B, length, V)`` float32 logits z_i (before the temperature).

    Examples:
        >>> from keras_seq import models
        >>> model = models.language_model(20, num_layers=1, units=8, num_heads=2, intermediate_dim=16)
        >>> run = tf.function(lambda ids: sample(model, ids, length=6, seed=1, context=4))
        >>> tuple(run(tf.constant([[5, 6, 7]])).shape)
        (1, 6)
    """
    require_tensorflow("keras_seq.decoding.sample")
    from keras_seq._validation import check_bool, check_int

    where = "sample"
    length = check_positive_int(where, "length", length)
    temperature = check_float(where, "temperature", temperature, low=0.0)
    seed = check_int(where, "seed", seed, allow_none=True)
    context = check_int(where, "context", context, minimum=2, allow_none=True)
    return_logits = check_bool(where, "return_logits", return_logits)
    never = sorted({PAD_ID, *(check_int(where, "suppress_ids", i, minimum=0) for i in suppress_ids)})
    prompt_ids = tf.convert_to_tensor(prompt_ids)
    if not prompt_ids.dtype.is_integer:
        raise invalid_type(
            where, "prompt_ids", "integer token ids", f"a tensor of dtype {prompt_ids.dtype.name}"
        )
    if prompt_ids.shape.rank != 2 or prompt_ids.shape[1] == 0:
        raise shape_error(where, "prompt_ids", "(batch, length) with length >= 1", prompt_ids.shape)
    steps = language_model_steps(model)
    if isinstance(steps, RecurrentLanguageModelSteps):
        context = None  # the state carries everything; no restarts
    ids, logits = _sample(
        steps, tf.cast(prompt_ids, tf.int32), length, temperature, seed, context,
        vocabulary_size=model.outputs[0].shape[-1], never=never,
    )
    return (ids, logits) if return_logits else ids


def _sample(steps, prompt_ids, length, temperature, seed, context, vocabulary_size, never):
    batch_size, prompt_length = tf.shape(prompt_ids)[0], tf.shape(prompt_ids)[1]
    total = prompt_length + length
    # Without a context, one cache holds the whole sequence (never restarted).
    window = total if context is None else tf.constant(context)
    keep = window // 2
    constants, state = steps.start(prompt_ids, total if context is None else context)
    ids = tf.concat([prompt_ids, tf.zeros([batch_size, length], tf.int32)], axis=1)
    if seed is None:
        seed = tf.random.uniform([], maxval=tf.int32.max, dtype=tf.int32)
    seed = tf.cast(seed, tf.int32)

    def draw(logits, position):
        excluded = tf.reduce_any(
            tf.equal(tf.range(vocabulary_size)[:, None], tf.constant(never)[None, :]), axis=-1
        )
        logits = tf.where(excluded, NEG_INF, logits)
        if temperature == 0.0:
            return tf.argmax(logits, axis=-1, output_type=tf.int32)
        return tf.random.stateless_categorical(
            logits / temperature, 1, seed=tf.stack([seed, position]), dtype=tf.int32
        )[:, 0]

    # i: the index of the token fed next, at cache position t; filled: tokens known.
    def cond(i, t, filled, ids, logits_buffer, state):
        return filled < total

    def body(i, t, filled, ids, logits_buffer, state):
        logits, state = steps.step(tf.gather(ids, i, axis=1), t, constants, state)
        logits = tf.cast(logits, tf.float32)
        new = tf.equal(i + 1, filled)  # the next token is not known yet: draw it
        token = draw(logits, filled)
        ids = tf.where(new, write_column(ids, filled, token), ids)
        at = tf.equal(tf.range(length), filled - prompt_length)[None, :, None]
        logits_buffer = tf.where(tf.logical_and(new, at), logits[:, None, :], logits_buffer)
        filled += tf.cast(new, tf.int32)
        i, t = i + 1, t + 1
        full = tf.equal(t, window)  # restart the cache from the last `keep` tokens
        i = tf.where(full, i - keep, i)
        t = tf.where(full, 0, t)
        return i, t, filled, ids, logits_buffer, state

    logits_buffer = tf.zeros([batch_size, length, vocabulary_size], tf.float32)
    _, _, _, ids, logits_buffer, _ = tf.while_loop(
        cond, body, (tf.constant(0), tf.constant(0), prompt_length, ids, logits_buffer, state)
    )
    return ids[:, prompt_length:], logits_buffer
