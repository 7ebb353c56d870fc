"""Transformer decoder block with self- and cross-attention caches."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq.layers import _masking
from keras_seq.layers.multi_head_attention import MultiHeadAttention
from keras_seq.layers.positionwise_feed_forward import PositionwiseFeedForward
from keras_seq.layers.transformer_encoder import (
    _block_config,
    _check_block_args,
    _check_width,
    _clone,
    _head_dim,
    _padding_attention_mask,
)


@keras.saving.register_keras_serializable(package="keras_seq")
class TransformerDecoder(keras.layers.Layer):
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

    Example:

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
        _check_block_args(
            "TransformerDecoder", intermediate_dim, num_heads, dropout, layer_norm_epsilon
        )
        self.intermediate_dim = intermediate_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.normalize_first = normalize_first
        self.supports_masking = True

    def _attention(self, name, head_dim, query_shape, value_shape):
        attention = MultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=head_dim,
            dropout=self.dropout,
            kernel_initializer=_clone(self.kernel_initializer),
            bias_initializer=_clone(self.bias_initializer),
            dtype=self.dtype_policy,
            name=name,
        )
        attention.build(query_shape=query_shape, value_shape=value_shape)
        return attention

    def _layer_norm(self, name, shape):
        norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )
        norm.build(shape)
        return norm

    def _dropout(self, name):
        return keras.layers.Dropout(self.dropout, dtype=self.dtype_policy, name=name)

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        hidden_dim = decoder_sequence_shape[-1]
        self._head_dim = _head_dim("TransformerDecoder", self.name, hidden_dim, self.num_heads)
        # Creation order fixes get_weights() order (KerasHub's).
        self._self_attention_layer = self._attention(
            "self_attention", self._head_dim, decoder_sequence_shape, decoder_sequence_shape
        )
        self._self_attention_layer_norm = self._layer_norm(
            "self_attention_layer_norm", decoder_sequence_shape
        )
        self._self_attention_dropout = self._dropout("self_attention_dropout")
        self._cross_attention_layer = None
        if encoder_sequence_shape is not None:
            self._cross_attention_layer = self._attention(
                "cross_attention", self._head_dim, decoder_sequence_shape, encoder_sequence_shape
            )
            self._cross_attention_layer_norm = self._layer_norm(
                "cross_attention_layer_norm", decoder_sequence_shape
            )
            self._cross_attention_dropout = self._dropout("cross_attention_dropout")
        self._feedforward = PositionwiseFeedForward(
            self.intermediate_dim,
            activation=self.activation,
            dropout=self.dropout,
            kernel_initializer=_clone(self.kernel_initializer),
            bias_initializer=_clone(self.bias_initializer),
            dtype=self.dtype_policy,
            name="feedforward",
        )
        self._feedforward.build(decoder_sequence_shape)
        self._feedforward_layer_norm = self._layer_norm(
            "feedforward_layer_norm", decoder_sequence_shape
        )
        self.built = True

    def _check_call(self, decoder_sequence, encoder_sequence, self_cache, cross_cache):
        name = f"TransformerDecoder '{self.name}'"
        has_cross = self._cross_attention_layer is not None
        if has_cross != (encoder_sequence is not None):
            built = "with" if has_cross else "without"
            raise ValueError(
                f"{name}: the layer was built {built} cross-attention, so "
                f"`encoder_sequence` must {'' if has_cross else 'not '}be given. "
                "Call it always as layer(decoder_sequence, encoder_sequence) or "
                "always as layer(decoder_sequence)."
            )
        for arg, tensor in (
            ("decoder_sequence", decoder_sequence),
            ("encoder_sequence", encoder_sequence),
        ):
            if tensor is not None and len(tensor.shape) != 3:
                raise ValueError(
                    f"{name}: `{arg}` must have shape (batch, time, features). "
                    f"Received {tuple(tensor.shape)}."
                )
        _check_width(
            name, "decoder_sequence", decoder_sequence, self._feedforward_layer_norm.gamma.shape[0]
        )
        if encoder_sequence is not None:
            _check_width(
                name,
                "encoder_sequence",
                encoder_sequence,
                self._cross_attention_layer._key_dense.kernel.shape[0],
            )
            b_d, b_e = decoder_sequence.shape[0], encoder_sequence.shape[0]
            if b_d is not None and b_e is not None and b_d != b_e:
                raise ValueError(
                    f"{name}: `decoder_sequence` and `encoder_sequence` must have the "
                    f"same batch size. Received {b_d} and {b_e}."
                )
        if cross_cache is not None and self_cache is None:
            raise ValueError(
                f"{name}: `cross_attention_cache` is only used together with "
                "`self_attention_cache` (incremental decoding)."
            )

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
            decoder_sequence, encoder_sequence, self_attention_cache, cross_attention_cache
        )
        name = f"TransformerDecoder '{self.name}'"
        decoding = self_attention_cache is not None
        if return_attention_scores and (decoding or encoder_sequence is None):
            raise ValueError(
                f"{name}: `return_attention_scores=True` returns the cross-attention "
                "weights, so it needs `encoder_sequence` and no caches."
            )
        if decoding:
            # Keys are the S cache positions; the implicit mask of the new
            # tokens cannot describe them, so only an explicit (B, S) mask counts.
            # The copy drops that implicit mask, which Keras would otherwise pass
            # to self-attention as a mask over the cache keys.
            decoder_sequence = ops.copy(decoder_sequence)
            key_length = self_attention_cache.shape[2]
            _masking.check_mask_shape(
                name,
                "decoder_padding_mask",
                decoder_padding_mask,
                (decoder_sequence.shape[0], key_length),
            )
            _masking.check_mask_shape(
                name,
                "decoder_attention_mask",
                decoder_attention_mask,
                (decoder_sequence.shape[0], decoder_sequence.shape[1], key_length),
            )
            self_mask = _masking.merge_attention_masks(
                None,
                None,
                key_masks=(decoder_padding_mask,),
                attention_mask=decoder_attention_mask,
            )
        else:
            self_mask = _padding_attention_mask(
                name,
                decoder_sequence,
                decoder_padding_mask,
                decoder_attention_mask,
                decoder_sequence.shape[1],
            )
        x = decoder_sequence

        # Masked self-attention block.
        residual = x
        if self.normalize_first:
            x = self._self_attention_layer_norm(x)
        cache_kwargs = {}
        if decoding:
            cache_kwargs = {
                "cache": self_attention_cache,
                "cache_update_index": self_attention_cache_update_index,
            }
        x = self._self_attention_layer(
            x,
            x,
            attention_mask=self_mask,
            use_causal_mask=use_causal_mask,
            training=training,
            **cache_kwargs,
        )
        if decoding:
            x, self_attention_cache = x
        x = self._self_attention_dropout(x, training=training) + residual
        if not self.normalize_first:
            x = self._self_attention_layer_norm(x)

        # Cross-attention block.
        if encoder_sequence is not None:
            cross_mask = _padding_attention_mask(
                name,
                encoder_sequence,
                encoder_padding_mask,
                encoder_attention_mask,
                encoder_sequence.shape[1],
            )
            residual = x
            if self.normalize_first:
                x = self._cross_attention_layer_norm(x)
            cache_kwargs = {}
            if decoding:
                if cross_attention_cache is None:
                    # First step: project the encoder output once, at index 0.
                    shape = ops.shape(encoder_sequence)
                    cross_attention_cache = ops.zeros(
                        (shape[0], 2, shape[1], self.num_heads, self._head_dim),
                        dtype=self.compute_dtype,
                    )
                    cross_attention_cache_update_index = 0
                cache_kwargs = {
                    "cache": cross_attention_cache,
                    "cache_update_index": cross_attention_cache_update_index,
                }
            x = self._cross_attention_layer(
                x,
                encoder_sequence,
                attention_mask=cross_mask,
                training=training,
                return_attention_scores=return_attention_scores,
                **cache_kwargs,
            )
            if decoding:
                x, cross_attention_cache = x
            if return_attention_scores:
                x, scores = x
            x = self._cross_attention_dropout(x, training=training) + residual
            if not self.normalize_first:
                x = self._cross_attention_layer_norm(x)

        # Feed-forward block.
        residual = x
        if self.normalize_first:
            x = self._feedforward_layer_norm(x)
        x = self._feedforward(x, training=training) + residual
        if not self.normalize_first:
            x = self._feedforward_layer_norm(x)

        if not decoding:
            return (x, scores) if return_attention_scores else x
        if encoder_sequence is None:
            return x, self_attention_cache
        return x, self_attention_cache, cross_attention_cache

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
        config.update(_block_config(self))
        return config
