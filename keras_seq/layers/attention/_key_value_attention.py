"""What `BahdanauAttention` and `LuongAttention` share: one score function apart.

`KeyValueAttention` checks the call's shapes, combines explicit and implicit
masks, takes a single decoder step `(B, dq)`, projects the keys once
(``precompute_keys``: ``k @ key_kernel``), and turns the scores ``e (B, Tq,
Tk)`` of its subclass's `score` into weights over the unmasked keys and the
context. A subclass builds ``key_kernel`` and its own weights and implements
`score` and `query_width`.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_seq import _validation
from keras_seq.layers.attention import _masking
from keras_seq.layers.quantization import KernelQuantization


class KeyValueAttention(KernelQuantization, keras.layers.Layer):
    """Attention of queries over keys/values with a projected key (a base class).

    Args:
        dropout: float, dropout rate on the attention weights (training only).
        seed: int or None, seed of the dropout.
    """

    def __init__(self, dropout: float = 0.0, seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.dropout = _validation.check_rate(self, "dropout", dropout)
        self.seed = _validation.check_int(self, "seed", seed, allow_none=True)
        self.supports_masking = True
        # Only with a rate: without sublayers the layer is one that
        # keras.Model.quantize quantizes (its kernels, `KernelQuantization`).
        if self.dropout:
            self._dropout_layer = keras.layers.Dropout(
                self.dropout, seed=self.seed, dtype=self.dtype_policy
            )

    # --- what a subclass provides ---

    def query_width(self) -> int:
        """The query width dq the built layer takes."""
        raise NotImplementedError(f"{type(self).__name__} must implement `query_width`.")

    def score(self, query, processed_key):
        """``e (B, Tq, Tk)`` from ``query (B, Tq, dq)`` and the projected keys."""
        raise NotImplementedError(f"{type(self).__name__} must implement `score`.")

    # --- shared ---

    def check_known_widths(self, query_shape, value_shape, key_shape):
        """The last axes the weights are built from must be known."""
        for arg, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
            if shape[-1] is None:
                raise _validation.shape_error(self, arg, "a known last axis", shape)

    def precompute_keys(self, key):
        """Returns ``k @ key_kernel``, to reuse across decoder steps."""
        key = ops.convert_to_tensor(key, dtype=self.compute_dtype)
        if not self.built:
            raise _validation.ArgumentValueError(
                self, "call the layer once (or build it) "
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
        self._check_width("query", query, self.query_width())
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
            processed_key = self.precompute_keys(value if key is None else key)
        e = self.score(query, processed_key)  # (B, Tq, Tk)
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
        return {**super().get_config(), "dropout": self.dropout, "seed": self.seed}
