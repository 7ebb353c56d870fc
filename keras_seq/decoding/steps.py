"""The one-step view of a model that the decoding loops drive: `DecoderSteps`
(`decoder_steps` for the seq2seq models, `language_model_steps` for the
language models), and `attention_weights`."""

from __future__ import annotations

from typing import Protocol

import keras
import tensorflow as tf

from keras_seq._backend import require_tensorflow
from keras_seq.models.language_model import language_model_kind
from keras_seq.models.seq2seq import seq2seq_kind
from keras_seq.reserved_tokens import PAD_ID

__all__ = [
    "DecoderSteps",
    "RecurrentLanguageModelSteps",
    "attention_weights",
    "decoder_steps",
    "language_model_steps",
]


class _RecurrentSteps:
    """One-step view of an `rnn_seq2seq` model."""

    def __init__(self, model):
        self.encoder = model.get_layer("encoder")
        self.embedding = model.get_layer("target_embedding")
        self.decoder = model.get_layer("decoder")
        self.logits = model.get_layer("logits")

    def _encode(self, encoder_inputs):
        """The annotations h and the decoder's first states (a monotonic
        model's encoder gives none: its decoder starts from zeros)."""
        outputs = self.encoder(encoder_inputs, training=False)
        h, *s0 = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        return h, self.decoder.first_states(tf.shape(h)[0], h, s0)

    def start(self, encoder_inputs, max_length):
        h, s0 = self._encode(encoder_inputs)
        constants = {"h": h, "mask": tf.not_equal(encoder_inputs, PAD_ID)}
        if self.decoder.attention is not None:
            constants["processed_key"] = self.decoder.precompute_keys(h)
        return constants, {"s": s0}

    def attention(self, encoder_inputs, decoder_inputs):
        if self.decoder.attention is None:
            raise ValueError(
                "keras_seq.decoding.attention_weights: this rnn_seq2seq model was built "
                "with attention=None; it has no attention weights."
            )
        h, s0 = self._encode(encoder_inputs)
        y = self.embedding(decoder_inputs)
        _, alpha = self.decoder(y, h, initial_state=s0, return_attention_scores=True)
        return alpha

    def step(self, tokens, t, constants, state):
        # tf.identity drops the Keras mask of the embedding: the cell has no use
        # for it (finished rows are handled by the search) and would warn.
        y = tf.identity(self.embedding(tokens))  # (B, E)
        o, s, _ = self.decoder.step(
            y,
            state["s"],
            constants["h"],
            constants.get("processed_key"),
            constants["mask"],
            training=False,
        )
        return self.logits(o), {"s": s}


class _TransformerSteps:
    """One-step view of a `transformer_seq2seq` model, with key/value caches.

    With ``decoder_only=True``, of a Transformer `models.language_model`: no
    encoder and no cross-attention; ``start`` reads only the batch size of
    its input (the prompt).
    """

    def __init__(self, model, decoder_only=False):
        prefix = "token" if decoder_only else "target"
        self.encoder = None if decoder_only else model.get_layer("encoder")
        self.embedding = model.get_layer(f"{prefix}_embedding")
        self.position = model.get_layer(f"{prefix}_position")
        self.blocks = []
        while True:
            try:
                self.blocks.append(model.get_layer(f"decoder_layer_{len(self.blocks)}"))
            except ValueError:
                break
        names = {layer.name for layer in model.layers}
        self.final_norm = (
            model.get_layer("decoder_final_norm") if "decoder_final_norm" in names else None
        )
        logits = model.get_layer("logits")
        self.output_dense = logits if isinstance(logits, keras.layers.Dense) else None
        self.num_heads = self.blocks[0].num_heads
        self.head_dim = self.embedding.output_dim // self.num_heads

    def _empty_cache(self, batch_size, length):
        return tf.zeros(
            [batch_size, 2, length, self.num_heads, self.head_dim], self.embedding.compute_dtype
        )

    def start(self, encoder_inputs, max_length):
        if self.encoder is None:
            batch_size = tf.shape(encoder_inputs)[0]
            return {}, {"self": [self._empty_cache(batch_size, max_length) for _ in self.blocks]}
        h = self.encoder(encoder_inputs, training=False)
        mask = tf.not_equal(encoder_inputs, PAD_ID)
        batch_size, source_length = tf.shape(h)[0], tf.shape(h)[1]
        # Cross-attention keys/values depend only on h: write them once, at
        # index 0, from a throwaway query (its self-attention result is unused).
        dummy = tf.zeros([batch_size, 1, self.embedding.output_dim], h.dtype)
        cross = []
        for block in self.blocks:
            _, _, c = block(
                dummy,
                h,
                encoder_padding_mask=mask,
                self_attention_cache=self._empty_cache(batch_size, max_length),
                self_attention_cache_update_index=0,
                cross_attention_cache=self._empty_cache(batch_size, source_length),
                cross_attention_cache_update_index=0,
                training=False,
            )
            cross.append(c)
        constants = {"h": h, "mask": mask, "cross": cross}
        state = {"self": [self._empty_cache(batch_size, max_length) for _ in self.blocks]}
        return constants, state

    def attention(self, encoder_inputs, decoder_inputs):
        h = self.encoder(encoder_inputs, training=False)
        masks = {
            "encoder_padding_mask": tf.not_equal(encoder_inputs, PAD_ID),
            "decoder_padding_mask": tf.not_equal(decoder_inputs, PAD_ID),
        }
        x = self.position(self.embedding(decoder_inputs))
        for block in self.blocks[:-1]:
            x = block(x, h, **masks, training=False)
        _, scores = self.blocks[-1](x, h, **masks, training=False, return_attention_scores=True)
        return tf.reduce_mean(tf.cast(scores, "float32"), axis=1)  # mean over heads

    def step(self, tokens, t, constants, state):
        x = self.embedding(tokens[:, None])  # (B, 1, d)
        # A fresh tensor without the Keras mask of the embedding: with a cache,
        # a (B, 1) implicit mask would reach the self-attention as a mask over
        # the S cache positions, where causal masking already does the job.
        x = tf.identity(self.position(x, start_index=t))
        caches = []
        for i, (block, cache) in enumerate(zip(self.blocks, state["self"])):
            if self.encoder is None:
                x, cache = block(
                    x, self_attention_cache=cache, self_attention_cache_update_index=t,
                    training=False,
                )
            else:
                x, cache, _ = block(
                    x,
                    constants["h"],
                    encoder_padding_mask=constants["mask"],
                    self_attention_cache=cache,
                    self_attention_cache_update_index=t,
                    cross_attention_cache=constants["cross"][i],
                    cross_attention_cache_update_index=None,
                    training=False,
                )
            caches.append(cache)
        if self.final_norm is not None:
            x = self.final_norm(x)
        x = x[:, 0]
        if self.output_dense is not None:
            logits = self.output_dense(x)
        else:
            logits = tf.cast(self.embedding(x, reverse=True), "float32")
        return logits, {"self": caches}


class DecoderSteps(Protocol):
    """The one-step view of a translation model that decoding runs on.

    `decoder_steps` returns one for a model built by `models.rnn_seq2seq` or
    `models.transformer_seq2seq`; `greedy_decode`, `beam_search` and the
    encoder/decoder-step exports of `keras_seq.export` all drive it. Write
    one for a model of your own (an image encoder, say) and
    `greedy_decode_steps` and `beam_search_steps` decode with it.
    ``constants`` and ``state`` are nests of tensors (dicts and lists); their
    structure is fixed for a given model, and for beam search every tensor
    in them has the batch axis first (the search repeats and reorders rows).
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

    def attention(self, encoder_inputs: tf.Tensor, decoder_inputs: tf.Tensor) -> tf.Tensor:
        """Teacher-forced attention weights ``(B, T, S)`` (see `attention_weights`)."""


def decoder_steps(model: keras.Model) -> DecoderSteps:
    """The `DecoderSteps` of a translation model: encode once, then decode step by step.

    Args:
        model: a model built by `models.rnn_seq2seq` or `models.transformer_seq2seq`.

    Returns:
        An object with ``start(encoder_inputs, max_length) -> (constants, state)``
        and ``step(tokens, t, constants, state) -> (logits, state)``.

    Raises:
        ValueError: the model lacks the named layers of those builders.

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
    kind = seq2seq_kind(model)
    if kind == "rnn":
        return _RecurrentSteps(model)
    if kind == "transformer":
        return _TransformerSteps(model)
    raise ValueError(
        f"keras_seq.decoding: model {getattr(model, 'name', model)!r} was not built by "
        "keras_seq.models.rnn_seq2seq or keras_seq.models.transformer_seq2seq "
        "(it lacks the named encoder/decoder layers decoding steps through)."
    )


class RecurrentLanguageModelSteps:
    """One-step view of a recurrent `models.language_model`: each layer's cell."""

    def __init__(self, model):
        self.embedding = model.get_layer("embedding")
        self.cells = []
        while True:
            try:
                self.cells.append(model.get_layer(f"recurrent_{len(self.cells)}").cell)
            except ValueError:
                break
        names = {layer.name for layer in model.layers}
        self.final_norm = model.get_layer("final_norm") if "final_norm" in names else None
        self.logits = model.get_layer("logits")

    def start(self, prompt_ids, max_length):
        batch_size = tf.shape(prompt_ids)[0]
        return {}, {"s": [list(cell.get_initial_state(batch_size)) for cell in self.cells]}

    def step(self, tokens, t, constants, state):
        x = tf.identity(self.embedding(tokens))  # (B, E), without the Keras mask
        states = []
        for cell, s in zip(self.cells, state["s"]):
            x, s = cell(x, s, training=False)
            states.append(list(s))
        if self.final_norm is not None:
            x = self.final_norm(x)
        return self.logits(x), {"s": states}


def language_model_steps(model: keras.Model) -> DecoderSteps:
    """The `DecoderSteps` of a `models.language_model`: one token at a time.

    ``start(prompt_ids, max_length)`` reads only the batch size of the
    ``(B, P)`` prompt and returns empty constants and the initial state: zero
    recurrent states, or one empty key/value cache of ``max_length``
    positions per Transformer block (the cache of `decoder_steps`).
    ``step(tokens, t, constants, state)`` feeds the ``(B,)`` tokens at cache
    position ``t`` (the Transformer's position encoding uses ``t``; the
    recurrent model ignores it) and returns the ``(B, V)`` logits of the next
    token.

    Raises:
        ValueError: the model was not built by `models.language_model`.

    Examples:
        >>> from keras_seq import models, decoding
        >>> model = models.language_model(20, num_layers=1, units=8, num_heads=2, intermediate_dim=16)
        >>> steps = decoding.language_model_steps(model)
        >>> constants, state = steps.start(tf.constant([[5, 6]]), max_length=4)
        >>> logits, state = steps.step(tf.constant([5]), tf.constant(0), constants, state)
        >>> tuple(logits.shape)
        (1, 20)
    """
    require_tensorflow("keras_seq.decoding.language_model_steps")
    kind = language_model_kind(model)
    if kind == "transformer":
        return _TransformerSteps(model, decoder_only=True)
    if kind == "rnn":
        return RecurrentLanguageModelSteps(model)
    raise ValueError(
        f"keras_seq.decoding: model {getattr(model, 'name', model)!r} was not built by "
        "keras_seq.models.language_model (it lacks the named layers sampling steps through)."
    )


def attention_weights(model, encoder_inputs, decoder_inputs):
    """Where each target position looks in the source, teacher-forced.

    Args:
        model: a model built by `keras_seq.models.rnn_seq2seq` (with
            attention) or `keras_seq.models.transformer_seq2seq`.
        encoder_inputs: ``(B, S)`` source token ids.
        decoder_inputs: ``(B, T)`` target ids shifted right (``[START]``
            first), e.g. ``[START]`` followed by a decoded output.

    Returns:
        ``(B, T, S)`` float weights; each row sums to 1 over the non-padding
        source positions. The recurrent model gives its Bahdanau α; the
        Transformer gives the cross-attention of its last decoder block,
        averaged over the heads.
    """
    require_tensorflow("keras_seq.decoding.attention_weights")
    return decoder_steps(model).attention(
        tf.cast(encoder_inputs, "int32"), tf.cast(decoder_inputs, "int32")
    )
