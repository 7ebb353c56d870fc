"""Additive (Bahdanau) attention with optional weight normalisation."""

from __future__ import annotations

import math

import keras
from keras import ops

from keras_seq import _validation
from keras_seq.layers import _masking


@keras.saving.register_keras_serializable(package="keras_seq")
class BahdanauAttention(keras.layers.Layer):
    """Additive attention of Bahdanau et al. 2015.

    For queries q_i (decoder states) and keys k_j / values v_j (encoder states):

        e_ij = vᵀ tanh(W_q q_i + W_k k_j)                    normalize=False
        e_ij = (g v / ‖v‖)ᵀ tanh(W_q q_i + W_k k_j + b)      normalize=True
        α_ij = softmax_j(e_ij)        over unmasked keys j
        c_i  = Σ_j α_ij v_j

    `normalize=True` is the weight-normalised form of Salimans & Kingma 2016
    (as in TensorFlow Addons' `BahdanauAttention`): g starts at sqrt(1/units),
    b at zero. Weights, in `get_weights()` order: `query_kernel (dq, units)`,
    `key_kernel (dk, units)`, `score_vector (units,)`, then
    `normalizer_bias (units,)` and `normalizer_gain ()` when `normalize`.

    Decoding one step at a time: `W_k k` does not depend on the decoder
    state, so compute it once per source sequence with
    `processed_key = layer.precompute_keys(key)` and pass
    `processed_key=processed_key` at every step; `key` is then not needed.

    Args:
        units: int, width of the additive score layer.
        normalize: bool, use the weight-normalised score (default False).
        dropout: float, dropout rate on the attention weights α (training only).

    Call arguments:
        query: `(B, Tq, dq)`, or one decoder step `(B, dq)` (then the outputs
            have no Tq axis).
        value: `(B, Tk, dv)`.
        key: `(B, Tk, dk)`, defaults to `value`.
        query_mask: `(B, Tq)` (or `(B,)` for one step); context at masked
            queries is zero. Defaults to the implicit Keras mask of `query`.
        value_mask: `(B, Tk)`; masked keys get zero weight. Defaults to the
            implicit Keras mask of `value`.
        return_attention_scores: also return α, `(B, Tq, Tk)` (before dropout),
            summing to 1 over unmasked keys (all zero if every key is masked).
        training: bool, enables dropout.
        processed_key: `(B, Tk, units)` from `precompute_keys`, used instead
            of projecting `key`.

    Returns:
        The context `(B, Tq, dv)` (or `(B, dv)`), and α if asked.

    Examples:
        ```python
        import numpy as np
        from keras_seq.layers import BahdanauAttention

        attention = BahdanauAttention(units=16)
        encoder_states = np.random.rand(2, 7, 8).astype("float32")
        decoder_state = np.random.rand(2, 12).astype("float32")
        attention.build(query_shape=(None, 12), value_shape=(None, None, 8))
        keys = attention.precompute_keys(encoder_states)      # once per source
        context, alpha = attention(decoder_state, encoder_states,
                                   processed_key=keys,
                                   return_attention_scores=True)  # (2, 8), (2, 7)
        ```

    References:
        - Bahdanau et al., 2015. Neural Machine Translation by Jointly Learning
          to Align and Translate. https://arxiv.org/abs/1409.0473
        - Salimans & Kingma, 2016. Weight Normalization.
          https://arxiv.org/abs/1602.07868
    """

    def __init__(
        self,
        units: int,
        normalize: bool = False,
        dropout: float = 0.0,
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.units = _validation.check_positive_int(self, "units", units)
        self.normalize = _validation.check_bool(self, "normalize", normalize)
        self.dropout = _validation.check_rate(self, "dropout", dropout)
        self.seed = _validation.check_int(self, "seed", seed, allow_none=True)
        self.supports_masking = True
        self._dropout_layer = keras.layers.Dropout(
            self.dropout, seed=self.seed, dtype=self.dtype_policy
        )

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        for arg, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
            if shape[-1] is None:
                raise _validation.shape_error(self, arg, "a known last axis", shape)
        self.query_kernel = self.add_weight(
            name="query_kernel", shape=(query_shape[-1], self.units), initializer="glorot_uniform"
        )
        self.key_kernel = self.add_weight(
            name="key_kernel", shape=(key_shape[-1], self.units), initializer="glorot_uniform"
        )
        self.score_vector = self.add_weight(
            name="score_vector", shape=(self.units,), initializer="glorot_uniform"
        )
        if self.normalize:
            self.normalizer_bias = self.add_weight(
                name="normalizer_bias", shape=(self.units,), initializer="zeros"
            )
            self.normalizer_gain = self.add_weight(
                name="normalizer_gain",
                shape=(),
                initializer=keras.initializers.Constant(math.sqrt(1.0 / self.units)),
            )
        self.built = True

    def precompute_keys(self, key):
        """Returns `W_k k`, `(B, Tk, units)`, to reuse across decoder steps."""
        key = ops.convert_to_tensor(key, dtype=self.compute_dtype)
        if not self.built:
            raise ValueError(
                f"BahdanauAttention '{self.name}': call the layer once (or build it) "
                "before `precompute_keys`, so that its weights exist."
            )
        self._check_width("key", key, self.key_kernel.shape[0])
        return ops.matmul(key, ops.cast(self.key_kernel, key.dtype))

    def _check_width(self, arg, tensor, width):
        if tensor.shape[-1] is not None and tensor.shape[-1] != width:
            raise _validation.shape_error(
                self, arg, f"(..., {width}) (the width the layer was built with)", tensor.shape
            )

    def _check_call(self, query, value, key, processed_key, query_mask, value_mask):
        """Every shape that must fit, checked before any computation."""
        if len(query.shape) != 3:
            raise _validation.shape_error(self, "query", "(B, Tq, dq) or (B, dq)", query.shape)
        if len(value.shape) != 3:
            raise _validation.shape_error(self, "value", "(B, Tk, dv)", value.shape)
        self._check_width("query", query, self.query_kernel.shape[0])
        if processed_key is not None:
            self._check_width("processed_key", processed_key, self.units)
        batch, length = query.shape[0], value.shape[1]
        for arg, tensor in (("value", value), ("key", key), ("processed_key", processed_key)):
            if tensor is None:
                continue
            if len(tensor.shape) != 3:
                raise _validation.shape_error(self, arg, "(B, Tk, features)", tensor.shape)
            if None not in (batch, tensor.shape[0]) and tensor.shape[0] != batch:
                raise _validation.shape_error(
                    self, arg, f"the batch size of `query`, {batch}", tensor.shape
                )
            # One weight per key, applied to the value at the same position.
            if None not in (length, tensor.shape[1]) and tensor.shape[1] != length:
                raise _validation.shape_error(
                    self, arg, f"the length of `value`, Tk={length}", tensor.shape
                )
        _masking.check_mask_shape(self, "query_mask", query_mask, (batch, query.shape[1]))
        _masking.check_mask_shape(self, "value_mask", value_mask, (batch, length))

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        return_attention_scores=False,
        training=None,
        processed_key=None,
    ):
        # Keras fills these from implicit masks only when they are None; an
        # explicit mask is combined with the implicit one here.
        query_mask = _masking.logical_and_masks(query_mask, _masking.keras_mask(query))
        value_mask = _masking.logical_and_masks(value_mask, _masking.keras_mask(value))
        single_step = len(query.shape) == 2
        if single_step:
            query = ops.expand_dims(query, 1)  # (B, 1, dq)
            if query_mask is not None and len(query_mask.shape) == 1:
                query_mask = ops.expand_dims(query_mask, 1)
        self._check_call(query, value, key, processed_key, query_mask, value_mask)
        if processed_key is None:
            processed_key = self.precompute_keys(value if key is None else key)

        processed_query = ops.matmul(query, self.query_kernel)  # W_q q, (B, Tq, units)
        h = ops.expand_dims(processed_query, 2) + ops.expand_dims(processed_key, 1)
        v = self.score_vector
        if self.normalize:
            h = h + self.normalizer_bias
            v = self.normalizer_gain * v / ops.sqrt(ops.sum(ops.square(v)))
        e = ops.sum(ops.tanh(h) * v, axis=-1)  # (B, Tq, Tk)

        mask = None if value_mask is None else ops.expand_dims(value_mask, 1)  # (B, 1, Tk)
        alpha = _masking.masked_softmax(e, mask)
        dropped = self._dropout_layer(alpha, training=training) if self.dropout else alpha
        context = ops.matmul(dropped, ops.cast(value, dropped.dtype))  # (B, Tq, dv)
        if query_mask is not None:
            context = context * ops.cast(ops.expand_dims(query_mask, -1), context.dtype)
        if single_step:
            context, alpha = context[:, 0], alpha[:, 0]
        return (context, alpha) if return_attention_scores else context

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        return tuple(query_shape[:-1]) + (value_shape[-1],)

    def compute_output_spec(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        return_attention_scores=False,
        training=None,
        processed_key=None,
    ):
        context = keras.KerasTensor(
            self.compute_output_shape(query.shape, value.shape), dtype=self.compute_dtype
        )
        if not return_attention_scores:
            return context
        alpha_shape = tuple(query.shape[:-1]) + (value.shape[1],)
        return context, keras.KerasTensor(alpha_shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "normalize": self.normalize,
                "dropout": self.dropout,
                "seed": self.seed,
            }
        )
        return config
