"""Transformer decoder block with self- and cross-attention caches."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq import _validation
from keras_seq._validation import ArgumentValueError
from keras_seq.layers.attention import _masking
from keras_seq.layers.attention import _transformer_block as block
from keras_seq.layers.quantization import SublayerQuantization


@keras.saving.register_keras_serializable(package="keras_seq")
class TransformerDecoder(SublayerQuantization, keras.layers.Layer):
    """One Transformer decoder block, argument-compatible with KerasHub's.

    Post-norm (Vaswani et al. 2017, `normalize_first=False`), for decoder
    input x and encoder output e:

        x = LayerNorm(x + Dropout(MaskedSelfAttention(x, x)))
        x = LayerNorm(x + Dropout(CrossAttention(x, e)))      # if e is given
        y = LayerNorm(x + FFN(x))

    Pre-norm (`normalize_first=True`) normalises each sub-layer's input
    instead: `x = x + Sublayer(LN(x))`. Called without `encoder_sequence` the
    block has no cross-attention (a GPT-style decoder-only block); the number
    of inputs must then stay the same in every call. The encoder width may
    differ from the decoder width.

    Incremental decoding: `self_attention_cache` is `(B, 2, S, H, d/H)`; the
    new keys/values of `decoder_sequence` (T tokens, usually 1) are written
    at `self_attention_cache_update_index` and the causal mask lets query `i`
    see cache positions up to that index + i. `cross_attention_cache` is
    `(B, 2, S_enc, H, d/H)`: with `cross_attention_cache_update_index=None`
    it is used as it is (the encoder projections are not recomputed); with an
    index (normally 0) the encoder keys/values are computed and written there.
    If a self-attention cache is given but no cross-attention cache, the
    cross-attention cache is computed from `encoder_sequence` and returned, so
    the first step can pass `cross_attention_cache=None`. With caches the
    call returns `(outputs, self_attention_cache, cross_attention_cache)`
    (`(outputs, self_attention_cache)` without cross-attention). While
    decoding with a cache, `decoder_padding_mask` covers the S cache
    positions, `(B, S)`, and `decoder_attention_mask` is `(B, T, S)`.

    `return_attention_scores=True` (with `encoder_sequence`, without caches)
    also returns the cross-attention weights, `(outputs, scores)` with scores
    `(B, H, T, S_enc)`: which encoder positions each output position reads.

    `get_weights()` order equals `keras_hub.layers.TransformerDecoder`'s (26
    arrays, 16 without cross-attention): self-attention (8), its LayerNorm
    γ/β, [cross-attention (8), its LayerNorm γ/β], feed-forward intermediate
    W/b, feed-forward output W/b, feed-forward LayerNorm γ/β.

    Args:
        intermediate_dim: int, hidden width of the feed-forward network.
        num_heads: int, number of attention heads; must divide the decoder width.
        dropout: float, dropout rate of attention weights and sub-layer outputs.
        activation: activation of the feed-forward hidden layer (`"relu"`).
        layer_norm_epsilon: float, LayerNorm epsilon (1e-5).
        kernel_initializer: initializer of all kernels (`"glorot_uniform"`).
        bias_initializer: initializer of all biases (`"zeros"`).
        normalize_first: bool, pre-norm instead of post-norm (False).

    Examples:
        ```python
        import numpy as np
        from keras_seq.layers import TransformerDecoder

        dec = TransformerDecoder(intermediate_dim=32, num_heads=2)
        x = np.random.rand(2, 5, 8).astype("float32")
        e = np.random.rand(2, 7, 12).astype("float32")
        y = dec(x, e)                                        # (2, 5, 8), causal
        cache = np.zeros((2, 2, 5, 2, 4), "float32")
        y0, cache, cross = dec(x[:, :1], e, self_attention_cache=cache,
                               self_attention_cache_update_index=0)
        y1, cache, cross = dec(x[:, 1:2], e, self_attention_cache=cache,
                               self_attention_cache_update_index=1,
                               cross_attention_cache=cross)  # equals y[:, 1:2]
        ```

    References:
        - Vaswani et al., 2017. Attention Is All You Need.
          https://arxiv.org/abs/1706.03762
    """

    def __init__(
        self,
        intermediate_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        activation="relu",
        layer_norm_epsilon: float = 1e-5,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        normalize_first: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        block.set_block_args(
            self, intermediate_dim, num_heads, dropout, activation, layer_norm_epsilon,
            kernel_initializer, bias_initializer, normalize_first,
        )
        self.supports_masking = True

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        block.check_sequence(self, "decoder_sequence", decoder_sequence_shape)
        if encoder_sequence_shape is not None:
            block.check_sequence(self, "encoder_sequence", encoder_sequence_shape)
        shape = decoder_sequence_shape
        self._head_dim = block.head_dim(self, shape[-1], self.num_heads)
        # Creation order fixes get_weights() order (KerasHub's).
        self._self_attention_layer = block.make_attention(
            self, "self_attention", self._head_dim, shape, shape
        )
        self._self_attention_layer_norm = block.make_layer_norm(
            self, "self_attention_layer_norm", shape
        )
        self._self_attention_dropout = block.make_dropout(self, "self_attention_dropout")
        self._cross_attention_layer = None
        if encoder_sequence_shape is not None:
            self._cross_attention_layer = block.make_attention(
                self, "cross_attention", self._head_dim, shape, encoder_sequence_shape
            )
            self._cross_attention_layer_norm = block.make_layer_norm(
                self, "cross_attention_layer_norm", shape
            )
            self._cross_attention_dropout = block.make_dropout(self, "cross_attention_dropout")
        self._feedforward = block.make_feedforward(self, shape)
        self._feedforward_layer_norm = block.make_layer_norm(self, "feedforward_layer_norm", shape)
        self.built = True

    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        decoder_attention_mask=None,
        encoder_padding_mask=None,
        encoder_attention_mask=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        cross_attention_cache_update_index=None,
        use_causal_mask=True,
        training=None,
        return_attention_scores=False,
    ):
        self._check_call(
            decoder_sequence,
            encoder_sequence,
            self_attention_cache,
            cross_attention_cache,
            return_attention_scores,
        )
        decoding = self_attention_cache is not None
        if decoding:
            # The copy drops the implicit mask of the new tokens, which Keras
            # would otherwise pass to self-attention as a mask over the cache keys.
            decoder_sequence = ops.copy(decoder_sequence)
        x = _validation.float_inputs(self, decoder_sequence)

        self_mask = self._self_attention_mask(
            decoder_sequence, decoder_padding_mask, decoder_attention_mask, self_attention_cache
        )
        x, self_attention_cache = self._self_attention_sublayer(
            x,
            self_mask,
            use_causal_mask,
            self_attention_cache,
            self_attention_cache_update_index,
            training,
        )

        scores = None
        if encoder_sequence is not None:
            cross_mask = block.padding_attention_mask(
                self,
                encoder_sequence,
                encoder_padding_mask,
                encoder_attention_mask,
                encoder_sequence.shape[1],
            )
            if decoding and cross_attention_cache is None:
                # First step: project the encoder output once, at index 0.
                cross_attention_cache = self._empty_cross_attention_cache(encoder_sequence)
                cross_attention_cache_update_index = 0
            x, scores, cross_attention_cache = self._cross_attention_sublayer(
                x,
                _validation.float_inputs(self, encoder_sequence),  # its mask is in cross_mask
                cross_mask,
                cross_attention_cache,
                cross_attention_cache_update_index,
                return_attention_scores,
                training,
            )

        x = block.feedforward_sublayer(
            x, self._feedforward_layer_norm, self._feedforward, self.normalize_first, training
        )

        if not decoding:
            return (x, scores) if return_attention_scores else x
        if encoder_sequence is None:
            return x, self_attention_cache
        return x, self_attention_cache, cross_attention_cache

    def _check_call(
        self, decoder_sequence, encoder_sequence, self_cache, cross_cache, return_attention_scores
    ):
        has_cross = self._cross_attention_layer is not None
        if has_cross != (encoder_sequence is not None):
            built = "with" if has_cross else "without"
            raise ArgumentValueError(_validation.owner_name(self), f"the layer was built {built} cross-attention, so `encoder_sequence` must {('' if has_cross else 'not ')}be given. Call it always as layer(decoder_sequence, encoder_sequence) or always as layer(decoder_sequence).")
        width = self._feedforward_layer_norm.gamma.shape[0]
        block.check_sequence(self, "decoder_sequence", decoder_sequence.shape, width)
        if encoder_sequence is not None:
            encoder_width = self._cross_attention_layer.key_dense.kernel.shape[0]
            block.check_sequence(
                self, "encoder_sequence", encoder_sequence.shape, encoder_width
            )
            b_d, b_e = decoder_sequence.shape[0], encoder_sequence.shape[0]
            if b_d is not None and b_e is not None and b_d != b_e:
                raise _validation.shape_error(
                    self,
                    "encoder_sequence",
                    f"the batch size of `decoder_sequence`, {b_d}",
                    encoder_sequence.shape,
                )
        if cross_cache is not None and self_cache is None:
            raise ArgumentValueError(_validation.owner_name(self), '`cross_attention_cache` is only used together with `self_attention_cache` (incremental decoding).')
        if return_attention_scores and (self_cache is not None or encoder_sequence is None):
            raise ArgumentValueError(_validation.owner_name(self), '`return_attention_scores=True` returns the cross-attention weights, so it needs `encoder_sequence` and no caches.')

    def _self_attention_mask(self, decoder_sequence, padding_mask, attention_mask, cache):
        """The `(B, 1|T, S)` self-attention mask (without the causal part), or None."""
        if cache is None:
            return block.padding_attention_mask(
                self, decoder_sequence, padding_mask, attention_mask, decoder_sequence.shape[1]
            )
        # Keys are the S cache positions; the implicit mask of the new tokens
        # cannot describe them, so only an explicit (B, S) mask counts.
        batch, length = decoder_sequence.shape[0], decoder_sequence.shape[1]
        key_length = cache.shape[2]
        _masking.check_mask_shape(self, "decoder_padding_mask", padding_mask, (batch, key_length))
        _masking.check_mask_shape(
            self, "decoder_attention_mask", attention_mask, (batch, length, key_length)
        )
        return _masking.merge_attention_masks(
            None, None, key_masks=(padding_mask,), attention_mask=attention_mask
        )

    def _self_attention_sublayer(self, x, mask, use_causal_mask, cache, cache_index, training):
        """Masked self-attention with add & norm; returns `(x, cache)` (cache None without one)."""
        residual = x
        if self.normalize_first:
            x = self._self_attention_layer_norm(x)
        outputs = self._self_attention_layer(
            x,
            x,
            attention_mask=mask,
            use_causal_mask=use_causal_mask,
            training=training,
            cache=cache,
            cache_update_index=cache_index,
        )
        if cache is None:
            x = outputs
        else:
            x, cache = outputs
        x = self._self_attention_dropout(x, training=training) + residual
        if not self.normalize_first:
            x = self._self_attention_layer_norm(x)
        return x, cache

    def _empty_cross_attention_cache(self, encoder_sequence):
        shape = ops.shape(encoder_sequence)
        return ops.zeros(
            (shape[0], 2, shape[1], self.num_heads, self._head_dim), dtype=self.compute_dtype
        )

    def _cross_attention_sublayer(
        self, x, encoder_sequence, mask, cache, cache_index, return_attention_scores, training
    ):
        """Cross-attention to the encoder with add & norm; returns `(x, scores, cache)`
        (scores None unless asked, cache None without one)."""
        residual = x
        if self.normalize_first:
            x = self._cross_attention_layer_norm(x)
        outputs = self._cross_attention_layer(
            x,
            encoder_sequence,
            attention_mask=mask,
            training=training,
            return_attention_scores=return_attention_scores,
            cache=cache,
            cache_update_index=cache_index,
        )
        scores = None
        if cache is not None:  # scores are refused with caches (_check_call)
            x, cache = outputs
        elif return_attention_scores:
            x, scores = outputs
        else:
            x = outputs
        x = self._cross_attention_dropout(x, training=training) + residual
        if not self.normalize_first:
            x = self._cross_attention_layer_norm(x)
        return x, scores, cache

    def compute_output_shape(self, decoder_sequence_shape, encoder_sequence_shape=None):
        return decoder_sequence_shape

    def compute_output_spec(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        decoder_attention_mask=None,
        encoder_padding_mask=None,
        encoder_attention_mask=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        cross_attention_cache_update_index=None,
        use_causal_mask=True,
        training=None,
        return_attention_scores=False,
    ):
        outputs = keras.KerasTensor(decoder_sequence.shape, dtype=self.compute_dtype)
        if return_attention_scores:
            batch, length = decoder_sequence.shape[0], decoder_sequence.shape[1]
            scores_shape = (batch, self.num_heads, length, encoder_sequence.shape[1])
            return outputs, keras.KerasTensor(scores_shape, dtype=self.compute_dtype)
        if self_attention_cache is None:
            return outputs
        self_cache = keras.KerasTensor(self_attention_cache.shape, dtype=self.compute_dtype)
        if encoder_sequence is None:
            return outputs, self_cache
        if cross_attention_cache is not None:
            cross_shape = cross_attention_cache.shape
        else:
            cross_shape = (encoder_sequence.shape[0], 2, encoder_sequence.shape[1])
            cross_shape += (self.num_heads, self._head_dim)
        return outputs, self_cache, keras.KerasTensor(cross_shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(block.block_config(self))
        return config
