"""`CausalLM`: a language model that predicts each next token."""

from __future__ import annotations

import keras

from keras_seq.layers import PaddingMask, TokenEmbedding, TransformerDecoder
from keras_seq.reserved_tokens import RESERVED_TOKENS
from keras_seq.tasks.preprocessor import Preprocessor
from keras_seq.tasks.task import Task

__all__ = ["CausalLM", "CausalLMPreprocessor"]


@keras.saving.register_keras_serializable(package="keras_seq")
class CausalLMPreprocessor(Preprocessor):
    """A language model's strings: its tokenizer and the context it was trained on.

    Args:
        tokenizer: the tokenizer (characters for ``keras-seq train --task lm``).
        sequence_length: int, the context: tokens a training window holds, and
            the window the Transformer's cache holds when it generates.
    """


@keras.saving.register_keras_serializable(package="keras_seq")
class CausalLM(Task):
    """A language model: token ids ``(B, T)`` -> the logits ``(B, T, V)`` of each next token.

    A token embedding, then a stack of blocks, each reading only the tokens
    before it: `TransformerDecoder` blocks without cross-attention (causal
    self-attention, positions from `SinusoidalPositionalEncoding`), or
    recurrent layers (any `keras.layers.RNN`: this package's recurrent
    layers, `RNN(RecurrentBlock(...))` residual blocks around any cell, a
    user's cell included); an optional final norm; the output layer, or the
    embedding's transpose (tied). `models.language_model` builds these.

    The one step: `call_with_cache` feeds the next token with the cache of
    a generation (`build_cache`: each recurrent layer's states, or each
    block's key/value cache), as KerasHub's `CausalLM` does; generation
    (`generate`, `keras_seq.decoding.sample`, `keras_seq.samplers`), the
    streaming model and the on-device step of `keras_seq.export` all run it.

    Args:
        token_embedding: the token ids' embedding (`keras.layers.Embedding`,
            or a `TokenEmbedding` for the Transformer's tied logits).
        blocks: a list of `TransformerDecoder` blocks, or of recurrent layers
            (``return_sequences=True``).
        output_layer: the layer to the logits; None: the embedding's
            transpose (a `TokenEmbedding`'s ``reverse``).
        token_position: the Transformer's `SinusoidalPositionalEncoding`.
        final_norm: a layer after the last block, or None.
        dropout: float: dropout on the embeddings (the Transformer's) or
            before each recurrent layer and the output layer.
        preprocessor: a `CausalLMPreprocessor`, for strings.
    """

    _PARTS = ("token_embedding", "blocks", "output_layer", "token_position", "final_norm")
    _VALUES = ("dropout",)

    def __init__(self, token_embedding, blocks, output_layer=None, token_position=None,
                 final_norm=None, dropout: float = 0.0, preprocessor=None, **kwargs):
        from keras_seq._validation import check_rate

        dropout = check_rate("CausalLM", "dropout", dropout)
        blocks = list(blocks)
        if output_layer is None and not isinstance(token_embedding, TokenEmbedding):
            from keras_seq._validation import ArgumentValueError

            raise ArgumentValueError(
                "CausalLM", "`output_layer` is needed: without one the logits are the "
                "embedding's transpose, which a `TokenEmbedding` gives; received "
                f"token_embedding={type(token_embedding).__name__}.")
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        if isinstance(blocks[0], TransformerDecoder):
            mask = PaddingMask(name="padding_mask")(token_ids)
            x = token_position(token_embedding(token_ids))
            x = keras.layers.Dropout(dropout, name="token_dropout")(x)
            for block in blocks:
                x = block(x, decoder_padding_mask=mask)
        else:
            x = token_embedding(token_ids)
            for i, block in enumerate(blocks):
                x = keras.layers.Dropout(dropout, name=f"dropout_{i}")(x)
                x = block(x)
        if final_norm is not None:
            x = final_norm(x)
        hidden = x
        tied_logits = output_dropout = None
        if output_layer is None:
            # A float32 identity keeps the output name and float32 logits
            # under mixed precision.
            tied_logits = keras.layers.Activation("linear", dtype="float32", name="logits")
        elif not isinstance(blocks[0], TransformerDecoder):
            output_dropout = keras.layers.Dropout(dropout, name="output_dropout")
        head = (token_embedding, output_layer, tied_logits, output_dropout)
        logits = _head(hidden, *head)
        super().__init__(inputs=token_ids, outputs=logits, preprocessor=preprocessor, **kwargs)
        self.token_embedding, self.output_layer = token_embedding, output_layer
        self._tied_logits, self._output_dropout = tied_logits, output_dropout
        self.blocks = blocks
        self.token_position = token_position
        self.final_norm = final_norm
        self.dropout = dropout
        self._hidden = hidden

    # --- what it is ---

    @property
    def recurrent(self) -> bool:
        """Whether the blocks are recurrent layers (else Transformer blocks)."""
        return not isinstance(self.blocks[0], TransformerDecoder)

    @property
    def positional_cache(self) -> bool:
        """Whether the cache holds positions (the Transformer's keys and
        values), so that a step's ``index`` says where it writes; a recurrent
        model's states hold no positions and its steps ignore ``index``."""
        return not self.recurrent

    @property
    def vocabulary_size(self) -> int:
        """The width of the logits."""
        return int(self.output.shape[-1])

    def head(self, hidden):
        """The logits ``(..., V)`` of hidden states ``(..., d)``: the output
        layer (after its dropout), or the tied embedding's transpose."""
        return _head(hidden, self.token_embedding, self.output_layer, self._tied_logits,
                     self._output_dropout)

    @property
    def backbone(self) -> keras.Model:
        """The model ``token_ids (B, T)`` -> the hidden states ``(B, T, d)`` the
        logits are read from, sharing this model's layers (a classifier built
        on it, `TextClassifier`, fine-tunes them)."""
        return keras.Model(self.inputs[0], self._hidden, name=f"{self.name}_backbone")

    # --- the cached step ---

    def build_cache(self, token_ids, max_length: int) -> dict:
        """The cache a generation starts from: ``{"s": each recurrent layer's
        states}`` (zeros, or a cell's own start), or ``{"self": one key/value
        cache per Transformer block}`` of ``max_length`` positions. Reads only
        the batch size of the prompt ``token_ids (B, P)``."""
        import tensorflow as tf

        batch_size = tf.shape(token_ids)[0]
        if self.recurrent:
            return {"s": [list(_as_list(block.cell.get_initial_state(batch_size)))
                          for block in self.blocks]}
        head_dim = self.token_embedding.output_dim // self.blocks[0].num_heads
        shape = [batch_size, 2, max_length, self.blocks[0].num_heads, head_dim]
        return {"self": [tf.zeros(shape, self.token_embedding.compute_dtype)
                         for _ in self.blocks]}

    def call_with_cache(self, token_ids, cache: dict, index):
        """Feeds one token per row: ``(logits, hidden, new_cache)``.

        Args:
            token_ids: ``(B,)`` int32, the token at position ``index``.
            cache: `build_cache`'s, as the previous step left it.
            index: the token's position in the cache (the Transformer's
                positional encoding and its cache write use it; a recurrent
                model ignores it).

        Returns:
            ``(B, V)`` logits of the next token, the ``(B, d)`` hidden state
            they are read from, and the updated cache.
        """
        import tensorflow as tf

        if self.recurrent:
            x = tf.identity(self.token_embedding(token_ids))  # (B, E), without the Keras mask
            states = []
            for block, s in zip(self.blocks, cache["s"]):
                x, s = block.cell(x, s, training=False)
                states.append(_as_list(s))
            new_cache = {"s": states}
        else:
            x = self.token_embedding(token_ids[:, None])  # (B, 1, d)
            # A fresh tensor without the Keras mask of the embedding: with a
            # cache, a (B, 1) implicit mask would reach the self-attention as a
            # mask over the cache positions, where causal masking does the job.
            x = tf.identity(self.token_position(x, start_index=index))
            caches = []
            for block, block_cache in zip(self.blocks, cache["self"]):
                x, block_cache = block(x, self_attention_cache=block_cache,
                                       self_attention_cache_update_index=index, training=False)
                caches.append(block_cache)
            x = x[:, 0]
            new_cache = {"self": caches}
        if self.final_norm is not None:
            x = self.final_norm(x)
        if self.output_layer is not None:
            logits = self.output_layer(x)
        else:
            logits = tf.cast(self.token_embedding(x, reverse=True), "float32")
        return logits, x, new_cache

    # --- strings ---

    def generate(self, inputs, max_length: int | None = None, sampler="greedy"):
        """Continues a prompt (a string, or each of a list of strings).

        As KerasHub's ``CausalLM.generate``: the output is the prompt and its
        continuation, ``max_length`` tokens in all (default: the prompt and
        the preprocessor's ``sequence_length`` more). The reserved tokens are
        never generated. The Transformer attends to the last
        ``sequence_length`` positions at most, restarting its cache as
        `keras_seq.decoding.sample` describes.

        Args:
            inputs: a prompt (a non-empty string), or a list of them.
            max_length: int, tokens of each output, the prompt included.
            sampler: a `keras_seq.samplers.Sampler` or its name.

        Returns:
            The prompt and its continuation (a string), or one per prompt.
        """
        import tensorflow as tf

        from keras_seq import samplers
        from keras_seq._validation import check_positive_int, invalid_value
        from keras_seq.tasks.steps import LanguageModelSteps

        preprocessor = self._require_preprocessor("generate")
        single = isinstance(inputs, str)
        prompts = [inputs] if single else list(inputs)
        sampler = samplers.get(sampler)
        tokenizer, context = preprocessor.tokenizer, preprocessor.sequence_length
        steps = LanguageModelSteps(self, context=context)
        suppress = range(len(RESERVED_TOKENS))
        outputs = []
        for prompt in prompts:
            ids = tokenizer.tokenize([prompt]).to_tensor()
            length = int(ids.shape[1])
            if not length:
                raise invalid_value("CausalLM.generate", "inputs", "prompts of at least one "
                                    "token", prompt)
            total = check_positive_int("CausalLM.generate", "max_length",
                                       max_length or length + (context or 1))
            if total <= length:
                raise invalid_value("CausalLM.generate", "max_length",
                                    f"more than the prompt's {length} tokens", total)
            continuation = tf.function(
                lambda ids, n=total - length: sampler(steps, ids, n, end_id=None,
                                                      suppress_ids=suppress),
                autograph=False)(ids)
            outputs.append(prompt + tokenizer.detokenize(continuation).numpy()[0].decode("utf-8"))
        return outputs[0] if single else outputs


def _head(hidden, token_embedding, output_layer, tied_logits, output_dropout):
    if output_layer is None:
        return tied_logits(token_embedding(hidden, reverse=True))
    if output_dropout is not None:
        hidden = output_dropout(hidden)
    return output_layer(hidden)


def _as_list(states) -> list:
    return list(states) if isinstance(states, (list, tuple)) else [states]
