"""The one-step view of a model that the decoding loops drive: `DecoderSteps`
(`decoder_steps` for the translators, `language_model_steps` for the
language models), and `attention_weights`.

Both views ask the task for its own cached step (`keras_seq.tasks.Seq2SeqLM`
and `keras_seq.tasks.CausalLM`'s ``call_with_cache``), through the tasks'
own adapters (`keras_seq.tasks.steps`): nothing here knows a model's layers.
"""

from __future__ import annotations

from typing import Protocol

import keras
import tensorflow as tf

from keras_seq._backend import require_tensorflow
from keras_seq._validation import check_int, invalid_value
from keras_seq.tasks import CausalLM, Seq2SeqLM, as_task
from keras_seq.tasks.steps import LanguageModelSteps, Seq2SeqSteps

__all__ = [
    "DecoderSteps",
    "LanguageModelSteps",
    "Seq2SeqSteps",
    "attention_weights",
    "decoder_steps",
    "language_model_steps",
]


class DecoderSteps(Protocol):
    """The one-step view of a model that decoding runs on.

    `decoder_steps` returns one for a translator (`keras_seq.tasks.Seq2SeqLM`,
    as built by `models.rnn_seq2seq` or `models.transformer_seq2seq`),
    `language_model_steps` for a language model; the samplers of
    `keras_seq.samplers` (and so `greedy_decode`, `beam_search`, `sample`)
    and the encoder/decoder-step exports of `keras_seq.export` all drive it.
    Write one for a model of your own (an image encoder, say) and
    `greedy_decode_steps` and `beam_search_steps` decode with it.
    ``constants`` and ``state`` are nests of tensors (dicts and lists); their
    structure is fixed for a given model, and for beam search every tensor
    in them has the batch axis first (the search repeats and reorders rows).

    Optional: ``first_tokens(inputs) -> (tokens (B,), t)``, what the loop
    feeds first and where (default: ``[START]`` at 0), and
    ``vocabulary_size``, the logits' width (a sampler asked for the logits
    needs it).
    """

    def start(self, encoder_inputs: tf.Tensor, max_length: int) -> tuple[dict, dict]:
        """Encodes ``(B, S)`` int32 source ids once.

        Returns ``(constants, state)``: what every step reads (encoder
        outputs, source mask, precomputed attention keys or cross-attention
        caches) and what each step updates (the recurrent state, or
        self-attention key/value caches holding ``max_length`` steps).
        """

    def step(
        self, tokens: tf.Tensor, t: tf.Tensor, constants: dict, state: dict
    ) -> tuple[tf.Tensor, dict]:
        """One decoder step: ``(B,)`` int32 tokens at position ``t`` ->
        ``((B, V) logits, new state)``."""


def decoder_steps(model: keras.Model) -> Seq2SeqSteps:
    """The `DecoderSteps` of a translation model: encode once, then decode step by step.

    Args:
        model: a `keras_seq.tasks.Seq2SeqLM` (as `models.rnn_seq2seq` or
            `models.transformer_seq2seq` build it, or loaded from a ``.keras``
            file of any release).

    Returns:
        An object with ``start(encoder_inputs, max_length) -> (constants, state)``
        and ``step(tokens, t, constants, state) -> (logits, state)``.

    Raises:
        ValueError: ``model`` is not a translator.

    Examples:
        >>> from keras_seq import models, decoding
        >>> model = models.rnn_seq2seq(20, 12, units=8, embedding_dim=4)
        >>> steps = decoding.decoder_steps(model)
        >>> constants, state = steps.start(tf.constant([[5, 6, 7]]), max_length=4)
        >>> logits, state = steps.step(tf.constant([2]), tf.constant(0), constants, state)
        >>> tuple(logits.shape)
        (1, 12)
    """
    require_tensorflow("keras_seq.decoding.decoder_steps")
    return Seq2SeqSteps(_task(model, Seq2SeqLM, "decoding",
                              "keras_seq.models.rnn_seq2seq or transformer_seq2seq"))


def language_model_steps(model: keras.Model, context: int | None = None) -> LanguageModelSteps:
    """The `DecoderSteps` of a language model: a prompt, then one token at a time.

    ``start(prompt_ids, max_length)`` feeds the ``(B, P)`` prompt but its last
    token (`LanguageModelSteps`), ``first_tokens`` gives that last token at
    position P − 1, and ``step(tokens, t, constants, state)`` feeds ``(B,)``
    tokens at position ``t`` and returns the ``(B, V)`` logits of the next
    token.

    Args:
        model: a `keras_seq.tasks.CausalLM` (as `models.language_model` builds it).
        context: int ≥ 2 or None: the Transformer's window (see
            `LanguageModelSteps`); a recurrent model ignores it.

    Raises:
        ValueError: the model is not a language model.

    Examples:
        >>> from keras_seq import models, decoding
        >>> model = models.language_model(20, num_layers=1, units=8, num_heads=2, intermediate_dim=16)
        >>> steps = decoding.language_model_steps(model)
        >>> constants, state = steps.start(tf.constant([[5, 6]]), max_length=4)
        >>> logits, state = steps.step(tf.constant([6]), tf.constant(1), constants, state)
        >>> tuple(logits.shape)
        (1, 20)
    """
    require_tensorflow("keras_seq.decoding.language_model_steps")
    context = check_int("language_model_steps", "context", context, minimum=2, allow_none=True)
    return LanguageModelSteps(_task(model, CausalLM, "decoding",
                                    "keras_seq.models.language_model"), context)


def _task(model, cls, where, builders):
    try:
        task = as_task(model, where)
    except TypeError:
        task = None
    if not isinstance(task, cls):
        raise invalid_value(f"keras_seq.{where}", "model",
                            f"a keras_seq.tasks.{cls.__name__} (a model built by {builders})",
                            getattr(model, "name", model))
    return task


def attention_weights(model, encoder_inputs, decoder_inputs):
    """Where each target position looks in the source, teacher-forced.

    Args:
        model: a translator (`keras_seq.tasks.Seq2SeqLM`) with attention.
        encoder_inputs: ``(B, S)`` source token ids.
        decoder_inputs: ``(B, T)`` target ids shifted right (``[START]``
            first), e.g. ``[START]`` followed by a decoded output.

    Returns:
        ``(B, T, S)`` float weights; each row sums to 1 over the non-padding
        source positions. The recurrent model gives its attention's α; the
        Transformer gives the cross-attention of its last decoder block,
        averaged over the heads.
    """
    require_tensorflow("keras_seq.decoding.attention_weights")
    return decoder_steps(model).attention(encoder_inputs, decoder_inputs)
