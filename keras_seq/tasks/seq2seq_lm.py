"""`Seq2SeqLM`: the translator, an encoder and a decoder that attends to it."""

from __future__ import annotations

import keras

from keras_seq.layers import PaddingMask, RecurrentDecoder
from keras_seq.reserved_tokens import PAD_ID
from keras_seq.tasks.preprocessor import Preprocessor
from keras_seq.tasks.task import Task

__all__ = ["Seq2SeqLM", "Seq2SeqLMPreprocessor"]

# Inputs decoded or translated at once by `Seq2SeqLM.generate`.
_GENERATE_BATCH = 1000


@keras.saving.register_keras_serializable(package="keras_seq")
class Seq2SeqLMPreprocessor(Preprocessor):
    """A translator's strings: one tokenizer for sources and targets, and their lengths.

    Args:
        tokenizer: the tokenizer of sources and targets.
        sequence_length: int, source tokens read (a longer source is cut).
        target_length: int, the most target tokens generated, ``[END]`` included.
    """

    def __init__(self, tokenizer=None, sequence_length: int | None = None,
                 target_length: int | None = None, **kwargs):
        super().__init__(tokenizer, sequence_length, **kwargs)
        from keras_seq._validation import check_positive_int

        self.target_length = check_positive_int(type(self).__name__, "target_length",
                                                target_length, allow_none=True)

    def get_config(self) -> dict:
        return {**super().get_config(), "target_length": self.target_length}


@keras.saving.register_keras_serializable(package="keras_seq")
class Seq2SeqLM(Task):
    """A translator: an encoder, a decoder that attends to it, and logits over the targets.

    Inputs ``{"encoder_inputs": (B, S), "decoder_inputs": (B, T)}`` token ids
    (0 = padding), output the logits ``(B, T, V)`` of the next target token,
    teacher-forced. Two decoders: a `RecurrentDecoder` (its attention reads
    the encoder's outputs at every step; the encoder may also give its first
    states) or a list of `TransformerDecoder` blocks (cross-attention to the
    encoder's outputs, with `SinusoidalPositionalEncoding` on the targets).
    `models.rnn_seq2seq` and `models.transformer_seq2seq` build these.

    The one step: `call_with_cache` runs the decoder on the next token with
    the cache of a decoding (`build_cache`: the encoder's memory, and the
    decoder's states, or its blocks' key/value caches), as KerasHub's
    `Seq2SeqLM` does; training with scheduled sampling, decoding
    (`generate`, `keras_seq.decoding`, `keras_seq.samplers`) and the exports
    of `keras_seq.export` all run it.

    Args:
        encoder: a `keras.Model`, source ids ``(B, S)`` -> the memory
            ``(B, S, d)``, and for a recurrent decoder optionally the
            decoder's first states after it (``[h, s_0, ...]``).
        target_embedding: the target ids' embedding (`keras.layers.Embedding`
            with ``mask_zero=True`` for a recurrent decoder, a
            `TokenEmbedding` for the Transformer's).
        decoder: a `RecurrentDecoder`, or a list of `TransformerDecoder` blocks.
        output_layer: the layer from the decoder's output to the logits; None:
            the logits are the target embedding's transpose (tied weights).
        target_position: the Transformer's `SinusoidalPositionalEncoding`.
        final_norm: a layer after the last Transformer block, or None.
        dropout: float, dropout on the target embeddings and (recurrent)
            before the output layer.
        preprocessor: a `Seq2SeqLMPreprocessor`, for strings.
    """

    _PARTS = ("encoder", "target_embedding", "decoder", "output_layer", "target_position",
              "final_norm")
    _VALUES = ("dropout",)

    def __init__(self, encoder, target_embedding, decoder, output_layer=None,
                 target_position=None, final_norm=None, dropout: float = 0.0,
                 preprocessor=None, **kwargs):
        from keras_seq._validation import check_rate

        dropout = check_rate("Seq2SeqLM", "dropout", dropout)
        encoder_inputs = keras.Input((None,), dtype="int32", name="encoder_inputs")
        decoder_inputs = keras.Input((None,), dtype="int32", name="decoder_inputs")
        target_dropout = keras.layers.Dropout(dropout, name="target_dropout")
        output_dropout = None
        if isinstance(decoder, RecurrentDecoder):
            encoded = encoder(encoder_inputs)
            h, *s0 = encoded if isinstance(encoded, (list, tuple)) else [encoded]
            y = target_dropout(target_embedding(decoder_inputs))
            if decoder.attention_units is not None:
                o = decoder(y, h, initial_state=s0 or None)
            else:
                o = decoder(y, initial_state=s0)
            output_dropout = keras.layers.Dropout(dropout, name="output_dropout")
            logits = output_layer(output_dropout(o))
        else:
            decoder = list(decoder)
            encoder_mask = PaddingMask(name="encoder_padding_mask")(encoder_inputs)
            decoder_mask = PaddingMask(name="decoder_padding_mask")(decoder_inputs)
            h = encoder(encoder_inputs)
            y = target_dropout(target_position(target_embedding(decoder_inputs)))
            for block in decoder:
                y = block(y, h, decoder_padding_mask=decoder_mask,
                          encoder_padding_mask=encoder_mask)
            if final_norm is not None:
                y = final_norm(y)
            if output_layer is None:
                # A float32 identity keeps the output name and float32 logits
                # under mixed precision.
                logits = keras.layers.Activation("linear", dtype="float32", name="logits")(
                    target_embedding(y, reverse=True))
            else:
                logits = output_layer(y)
        # A list of named inputs, not a dict: the model is still called with a
        # dict {"encoder_inputs": ..., "decoder_inputs": ...} (Keras matches the
        # names), and tf.lite.TFLiteConverter.from_keras_model, which calls the
        # model with a flat list, can convert it.
        super().__init__(inputs=[encoder_inputs, decoder_inputs], outputs=logits,
                         preprocessor=preprocessor, **kwargs)
        self.encoder = encoder
        self.target_embedding = target_embedding
        self.decoder = decoder
        self.output_layer = output_layer
        self.target_position = target_position
        self.final_norm = final_norm
        self.dropout = dropout
        self._target_dropout, self._output_dropout = target_dropout, output_dropout

    # --- what it is ---

    @property
    def recurrent(self) -> bool:
        """Whether the decoder is a `RecurrentDecoder` (else Transformer blocks)."""
        return isinstance(self.decoder, RecurrentDecoder)

    @property
    def monotonic(self) -> bool:
        """Whether the decoder attends monotonically (Raffel et al. 2017): a
        translator that can start before its source ends."""
        return self.recurrent and self.decoder.monotonic

    @property
    def vocabulary_size(self) -> int:
        """The width of the logits."""
        return int(self.output.shape[-1])

    # --- the cached step ---

    def build_cache(self, encoder_token_ids, max_length: int, training: bool = False) -> dict:
        """The cache a decoding starts from: ``{"memory": ..., "state": ...}``.

        ``memory`` is what every step reads and never changes: the encoder's
        outputs ``h``, the source ``mask`` and the attention's precomputed
        keys (``processed_key``), or the Transformer blocks' cross-attention
        caches (``cross``); ``state`` what each step updates: the decoder's
        states ``s`` (its cell's, then the monotonic alignment), or each
        block's self-attention key/value cache of ``max_length`` positions
        (``self``). Every tensor has the batch axis first.
        """
        import tensorflow as tf

        encoder_token_ids = tf.cast(encoder_token_ids, tf.int32)
        mask = tf.not_equal(encoder_token_ids, PAD_ID)
        if self.recurrent:
            outputs = self.encoder(encoder_token_ids, training=training)
            h, *s0 = outputs if isinstance(outputs, (list, tuple)) else [outputs]
            memory = {"h": h, "mask": mask}
            if self.decoder.attention is not None:
                memory["processed_key"] = self.decoder.precompute_keys(h)
            return {"memory": memory,
                    "state": {"s": self.decoder.first_states(tf.shape(h)[0], h, s0)}}
        h = self.encoder(encoder_token_ids, training=training)
        batch_size, source_length = tf.shape(h)[0], tf.shape(h)[1]
        # Cross-attention keys/values depend only on h: write them once, at
        # index 0, from a throwaway query (its self-attention result is unused).
        dummy = tf.zeros([batch_size, 1, self.target_embedding.output_dim], h.dtype)
        cross = []
        for block in self.decoder:
            _, _, c = block(
                dummy, h, encoder_padding_mask=mask,
                self_attention_cache=self._empty_cache(batch_size, max_length),
                self_attention_cache_update_index=0,
                cross_attention_cache=self._empty_cache(batch_size, source_length),
                cross_attention_cache_update_index=0, training=False,
            )
            cross.append(c)
        return {"memory": {"h": h, "mask": mask, "cross": cross},
                "state": {"self": [self._empty_cache(batch_size, max_length)
                                   for _ in self.decoder]}}

    def _empty_cache(self, batch_size, length):
        import tensorflow as tf

        block = self.decoder[0]
        head_dim = self.target_embedding.output_dim // block.num_heads
        return tf.zeros([batch_size, 2, length, block.num_heads, head_dim],
                        self.target_embedding.compute_dtype)

    def call_with_cache(self, token_ids, cache: dict, index, training: bool = False):
        """One decoder step: ``(logits, hidden, new_cache)``.

        Args:
            token_ids: ``(B,)`` int32, the previous target token of each row.
            cache: `build_cache`'s, as the previous step left it.
            index: the step's position (``[START]`` is fed at 0); the
                Transformer writes its self-attention cache there.
            training: run dropout (and the decoder's zoneout) as in training
                (scheduled sampling); default False.

        Returns:
            ``(B, V)`` logits, the ``(B, d)`` hidden state they are read from,
            and the cache with the new state (the memory unchanged).
        """
        import tensorflow as tf

        memory, state = cache["memory"], cache["state"]
        if self.recurrent:
            # tf.identity drops the Keras mask of the embedding: the cell has
            # no use for it (finished rows are handled by the search) and
            # would warn.
            y = tf.identity(self.target_embedding(token_ids))  # (B, E)
            y = self._target_dropout(y, training=training)
            o, s, _ = self.decoder.step(y, state["s"], memory["h"], memory.get("processed_key"),
                                        memory["mask"], training=training)
            logits = self.output_layer(self._output_dropout(o, training=training))
            return logits, o, {"memory": memory, "state": {"s": s}}
        x = self.target_embedding(token_ids[:, None])  # (B, 1, d)
        # A fresh tensor without the Keras mask of the embedding: with a cache,
        # a (B, 1) implicit mask would reach the self-attention as a mask over
        # the S cache positions, where causal masking already does the job.
        x = tf.identity(self.target_position(x, start_index=index))
        x = self._target_dropout(x, training=training)
        caches = []
        for block, block_cache, cross in zip(self.decoder, state["self"], memory["cross"]):
            x, block_cache, _ = block(
                x, memory["h"], encoder_padding_mask=memory["mask"],
                self_attention_cache=block_cache, self_attention_cache_update_index=index,
                cross_attention_cache=cross, cross_attention_cache_update_index=None,
                training=training,
            )
            caches.append(block_cache)
        if self.final_norm is not None:
            x = self.final_norm(x)
        hidden = x[:, 0]
        if self.output_layer is not None:
            logits = self.output_layer(hidden)
        else:
            logits = tf.cast(self.target_embedding(hidden, reverse=True), "float32")
        return logits, hidden, {"memory": memory, "state": {"self": caches}}

    def attention_weights(self, encoder_token_ids, decoder_token_ids):
        """Where each target position looks in the source, teacher-forced:
        ``(B, T, S)``, each row summing to 1 over the real source positions.

        The recurrent decoder's α (of its attention, None without one is an
        error); the Transformer's cross-attention of its last block, averaged
        over the heads.
        """
        import tensorflow as tf

        from keras_seq._validation import ArgumentValueError

        encoder_token_ids = tf.cast(encoder_token_ids, tf.int32)
        decoder_token_ids = tf.cast(decoder_token_ids, tf.int32)
        if self.recurrent:
            if self.decoder.attention is None:
                raise ArgumentValueError(
                    "Seq2SeqLM.attention_weights", "this translator's decoder has no "
                    "attention (rnn_seq2seq with attention=None), so no attention weights.")
            cache = self.build_cache(encoder_token_ids, 1)
            y = self.target_embedding(decoder_token_ids)
            _, alpha = self.decoder(y, cache["memory"]["h"],
                                    initial_state=cache["state"]["s"],
                                    return_attention_scores=True)
            return alpha
        h = self.encoder(encoder_token_ids, training=False)
        masks = {
            "encoder_padding_mask": tf.not_equal(encoder_token_ids, PAD_ID),
            "decoder_padding_mask": tf.not_equal(decoder_token_ids, PAD_ID),
        }
        x = self.target_position(self.target_embedding(decoder_token_ids))
        for block in self.decoder[:-1]:
            x = block(x, h, **masks, training=False)
        _, scores = self.decoder[-1](x, h, **masks, training=False,
                                     return_attention_scores=True)
        return tf.reduce_mean(tf.cast(scores, "float32"), axis=1)  # mean over heads

    # --- strings ---

    def generate(self, inputs, max_length: int | None = None, sampler="greedy"):
        """Translates a string or a list of strings (with the preprocessor's tokenizer).

        Args:
            inputs: a string, or a list of strings.
            max_length: int, the most target tokens, ``[END]`` included
                (default: the preprocessor's ``target_length``).
            sampler: a `keras_seq.samplers.Sampler` or its name (``"greedy"``,
                ``"beam"``, ``"top_k"``, ``"top_p"``, ``"random"``).

        Returns:
            The translation (a string), or one per input.
        """
        import tensorflow as tf

        from keras_seq import samplers
        from keras_seq._validation import check_positive_int
        from keras_seq.tasks.steps import Seq2SeqSteps

        preprocessor = self._require_preprocessor("generate")
        single = isinstance(inputs, str)
        texts = [inputs] if single else list(inputs)
        max_length = check_positive_int("Seq2SeqLM.generate", "max_length",
                                        max_length or preprocessor.target_length)
        sampler = samplers.get(sampler)
        tokenizer, length = preprocessor.tokenizer, preprocessor.sequence_length
        steps = Seq2SeqSteps(self)

        @tf.function(input_signature=[tf.TensorSpec([None, length], tf.int32)],
                     autograph=False)
        def translate(ids):
            return sampler(steps, ids, max_length)

        outputs = []
        for start in range(0, len(texts), _GENERATE_BATCH):
            ids = translate(tokenizer.encode(texts[start : start + _GENERATE_BATCH], length))
            outputs += [s.decode("utf-8") for s in tokenizer.detokenize(ids).numpy()]
        return outputs[0] if single else outputs
