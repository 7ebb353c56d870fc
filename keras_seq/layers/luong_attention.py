"""Multiplicative (Luong, "general") attention."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq import _validation
from keras_seq.layers import _masking


@keras.saving.register_keras_serializable(package="keras_seq")
class LuongAttention(keras.layers.Layer):
    """Multiplicative attention of Luong et al. 2015, the "general" score.

    For queries q_i (decoder states) and keys k_j / values v_j (encoder states):

        e_ij = q_i · (k_j W_a)              use_scale=False
        e_ij = g q_i · (k_j W_a)            use_scale=True, g learned, starts at 1
        α_ij = softmax_j(e_ij)              over unmasked keys j
        c_i  = Σ_j α_ij v_j

    W_a maps a key (width dk) into the query's space (width dq), so with W_a
    the identity (dk = dq) the layer equals
    `keras.layers.Attention(score_mode="dot")`. Weights, in `get_weights()`
    order: `key_kernel (dk, dq)`, then `scale ()` when `use_scale`.

    Decoding one step at a time: `k W_a` does not depend on the decoder state,
    so compute it once per source sequence with
    `processed_key = layer.precompute_keys(key)` and pass
    `processed_key=processed_key` at every step; `key` is then not needed.

    Args:
        units: int or None, the width W_a maps keys to. It must equal the
            query width dq (the score is a dot product with the query), so it
            only states that width up front: `None` (default) takes dq from
            the first query, and a `units` that differs from the query width
            is a `ValueError` at build.
        use_scale: bool, multiply the scores by a learned scalar g
            (default False).
        dropout: float, dropout rate on the attention weights α (training only).
        seed: int or None, seed of the dropout.

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
        processed_key: `(B, Tk, dq)` from `precompute_keys`, used instead of
            projecting `key`.

    Returns:
        The context `(B, Tq, dv)` (or `(B, dv)`), and α if asked.

    Examples:
        >>> import numpy as np
        >>> attention = LuongAttention(use_scale=True)
        >>> encoder_states = np.random.rand(2, 7, 8).astype("float32")
        >>> decoder_state = np.random.rand(2, 12).astype("float32")
        >>> attention.build(query_shape=(None, 12), value_shape=(None, None, 8))
        >>> [tuple(w.shape) for w in attention.get_weights()]
        [(8, 12), ()]
        >>> keys = attention.precompute_keys(encoder_states)  # once per source
        >>> context, alpha = attention(decoder_state, encoder_states,
        ...                            processed_key=keys,
        ...                            return_attention_scores=True)
        >>> tuple(context.shape), tuple(alpha.shape)
        ((2, 8), (2, 7))

    References:
        - Luong, Pham & Manning, 2015. Effective Approaches to Attention-based
          Neural Machine Translation. https://arxiv.org/abs/1508.04025
    """

    def __init__(
        self,
        units: int | None = None,
        use_scale: bool = False,
        dropout: float = 0.0,
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.units = _validation.check_positive_int(self, "units", units, allow_none=True)
        self.use_scale = _validation.check_bool(self, "use_scale", use_scale)
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
        if self.units is not None and query_shape[-1] != self.units:
            raise _validation.shape_error(
                self,
                "query",
                f"(..., {self.units}): the kernel maps keys to `units`={self.units} features "
                "and the score is their dot product with the query",
                query_shape,
            )
        self.key_kernel = self.add_weight(
            name="key_kernel", shape=(key_shape[-1], query_shape[-1]), initializer="glorot_uniform"
        )
        if self.use_scale:
            self.scale = self.add_weight(name="scale", shape=(), initializer="ones")
        self.built = True

    def precompute_keys(self, key):
        """Returns `k W_a`, `(B, Tk, dq)`, to reuse across decoder steps."""
        key = ops.convert_to_tensor(key, dtype=self.compute_dtype)
        if not self.built:
            raise ValueError(
                f"LuongAttention '{self.name}': call the layer once (or build it) "
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
        self._check_width("query", query, self.key_kernel.shape[1])
        if processed_key is not None:
            self._check_width("processed_key", processed_key, self.key_kernel.shape[1])
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
            processed_key = self.precompute_keys(value if key is None else key)  # k W_a

        q = query
        kW = ops.cast(processed_key, q.dtype)  # (B, Tk, dq)
        e = ops.matmul(q, ops.transpose(kW, (0, 2, 1)))  # (B, Tq, Tk)
        if self.use_scale:
            e = e * self.scale

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
                "use_scale": self.use_scale,
                "dropout": self.dropout,
                "seed": self.seed,
            }
        )
        return config
