"""Sampling text from a language model (`sample`), in one `tf.while_loop`."""

from __future__ import annotations

from collections.abc import Sequence

import keras
import tensorflow as tf

from keras_seq._backend import require_tensorflow
from keras_seq._validation import check_float, check_positive_int, invalid_type, shape_error
from keras_seq.decoding.steps import language_model_steps
from keras_seq.reserved_tokens import PAD_ID
from keras_seq.samplers import GreedySampler, RandomSampler

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
    as padding, not as a token), nor any id of ``suppress_ids``. The prompt
    is fed token by token, then each sampled token, through the model's own
    cached step (`language_model_steps`: the Transformer reuses its key/value
    caches, so each step costs one position, not the whole prefix); the
    choice is `keras_seq.samplers.GreedySampler`'s (``temperature=0``) or
    `keras_seq.samplers.RandomSampler`'s, in one `tf.while_loop`.

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
    steps = language_model_steps(model, context=context)
    sampler = GreedySampler() if temperature == 0.0 else RandomSampler(temperature, seed)
    return sampler(steps, tf.cast(prompt_ids, tf.int32), length, end_id=None,
                   suppress_ids=never, return_logits=return_logits)
