"""Multi-head scaled dot-product attention with a key/value cache."""

from __future__ import annotations

import math

import keras
from keras import ops

from keras_seq import _validation
from keras_seq._validation import ArgumentValueError
from keras_seq.layers.attention import _masking
from keras_seq.layers.quantization import SublayerQuantization


def _write_cache(cache, k_v, index):
    """`cache` (B, 2, S, H, d) with `k_v` (B, 2, T', H, d) written at positions index..index+T'-1.

    A select over the S positions rather than `ops.slice_update`: on TensorFlow
    the latter becomes the XLA op `XlaDynamicUpdateSlice`, which ONNX has no
    mapping for and TF Serving runs only with XLA enabled on CPU; `where` (and
    `take`) are core ops everywhere (TFLite SELECT_V2/GATHER, ONNX Where/Gather).
    """
    position = ops.arange(ops.shape(cache)[2], dtype="int32") - ops.cast(index, "int32")  # (S,)
    new_length = k_v.shape[2]
    if new_length is None or new_length != 1:
        # Row p of the cache takes row p - index of k_v where that exists.
        last = ops.shape(k_v)[2] - 1
        k_v = ops.take(k_v, ops.clip(position, 0, last), axis=2)  # (B, 2, S, H, d)
    else:
        last = 0
    written = ops.logical_and(position >= 0, position <= last)
    return ops.where(ops.reshape(written, (1, 1, -1, 1, 1)), k_v, cache)


@keras.saving.register_keras_serializable(package="keras_seq")
class MultiHeadAttention(SublayerQuantization, keras.layers.MultiHeadAttention):
    """Multi-head attention, `keras.layers.MultiHeadAttention` plus a key/value cache.

    For each head h (Vaswani et al. 2017, eq. 1 and section 3.2.2):

        q_h = x_q W_h^Q,   k_h = x_k W_h^K,   v_h = x_v W_h^V
        head_h = softmax(q_h k_hᵀ / sqrt(key_dim) + M) v_h
        output = concat(head_1, ..., head_H) W^O

    where M is 0 at kept and -inf at masked (query, key) pairs. The
    constructor, call signature and weights (`query`, `key`, `value`,
    `attention_output` EinsumDense sub-layers, in that `get_weights()` order)
    are those of `keras.layers.MultiHeadAttention`, so weights copy both ways.
    Differences:

    - The softmax runs in float32 under mixed precision, and a query row whose
      keys are all masked gets zero weights (finite output, never NaN).
    - Explicit `query_mask`, `value_mask` and `key_mask` arguments are honoured
      and combined (logical AND) with any implicit Keras masks.
    - Incremental decoding: `cache` is a `(B, 2, S, num_heads, key_dim)`
      tensor holding the projected keys (`cache[:, 0]`) and values
      (`cache[:, 1]`) of S positions, as in KerasHub's
      `CachedMultiHeadAttention`. With `cache_update_index=None` the cache is
      used as it is (e.g. cross-attention to an encoded source; `value` is
      then ignored). Otherwise the projections of `key`/`value` (T' new
      positions) are written at `cache_update_index` and attention runs over
      all S cached positions; with `use_causal_mask=True` query `i` sees keys
      up to `cache_update_index + i`. The call then returns
      `(output, new_cache)` or `(output, scores, new_cache)`. With a cache,
      `value_mask`/`key_mask` cover the S cache positions, and the implicit
      Keras masks of `value`/`key` (which only describe the new positions) are
      not used. A cache requires `value_dim == key_dim`.
    - `use_causal_mask=True` also works with several `attention_axes` (and
      with one that is not axis 1): positions are counted row-major over the
      attention axes, and query position p sees key positions up to p.
    - Arguments are checked by `keras_seq._validation`: NumPy integers are
      accepted, bools are not, and the message names the layer (it contains
      Keras' "argument `num_heads`" too).

    `_compute_attention` has Keras' signature and is called as Keras calls
    it, so subclasses written for Keras can override it; `call` passes every
    mask (causal included) in `attention_mask`.

    Args:
        num_heads: int, number of attention heads H.
        key_dim: int, size of each query/key head.
        value_dim: int or None, size of each value head (default `key_dim`).
        dropout: float in [0, 1), dropout rate on the attention weights.
        use_bias: bool, whether the projections have biases.
        output_shape: int or tuple, output feature shape (default: the query
            feature size).
        attention_axes: int or tuple, the axes attention runs over (default:
            all axes between batch and features).
        **kwargs: every other `keras.layers.MultiHeadAttention` argument
            (`kernel_initializer`, `seed`, ...).

    Examples:
        ```python
        import numpy as np
        from keras_seq.layers import MultiHeadAttention

        mha = MultiHeadAttention(num_heads=2, key_dim=4)
        x = np.random.rand(3, 5, 8).astype("float32")
        y = mha(x, x, use_causal_mask=True)                      # (3, 5, 8)
        cache = np.zeros((3, 2, 5, 2, 4), "float32")
        y0, cache = mha(x[:, :1], x[:, :1], cache=cache,
                        cache_update_index=0, use_causal_mask=True)  # step 0
        ```

    References:
        - Vaswani et al., 2017. Attention Is All You Need.
          https://arxiv.org/abs/1706.03762
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        value_dim: int | None = None,
        dropout: float = 0.0,
        use_bias: bool = True,
        output_shape=None,
        attention_axes=None,
        **kwargs,
    ):
        # Checked here, before Keras' own checks, so that the message names
        # the layer and NumPy integers are accepted (Keras wants a Python int).
        owner = type(self).__name__
        if kwargs.get("name"):
            owner += f" '{kwargs['name']}'"
        num_heads = _validation.check_positive_int(owner, "num_heads", num_heads)
        key_dim = _validation.check_positive_int(owner, "key_dim", key_dim)
        value_dim = _validation.check_positive_int(owner, "value_dim", value_dim, allow_none=True)
        dropout = _validation.check_rate(owner, "dropout", dropout)
        use_bias = _validation.check_bool(owner, "use_bias", use_bias)
        if kwargs.get("sliding_window") is not None:
            kwargs["sliding_window"] = _validation.check_positive_int(
                owner, "sliding_window", kwargs["sliding_window"]
            )
        super().__init__(
            num_heads,
            key_dim,
            value_dim=value_dim,
            dropout=dropout,
            use_bias=use_bias,
            output_shape=output_shape,
            attention_axes=attention_axes,
            **kwargs,
        )

    def _check_inputs(self, query, value, key, cache, cache_update_index):
        projections = [("query", query, self.query_dense)]
        if cache is None or cache_update_index is not None:  # else they are not projected
            projections += [("value", value, self.value_dense), ("key", key, self.key_dense)]
        for arg, tensor, dense in projections:
            width = dense.kernel.shape[0]
            if tensor.shape[-1] is not None and tensor.shape[-1] != width:
                raise _validation.shape_error(
                    self, arg, f"(..., {width}) (the width it was built with)", tensor.shape
                )
        for arg, tensor in (("value", value), ("key", key)):
            b_q, b_t = query.shape[0], tensor.shape[0]
            if b_q is not None and b_t is not None and b_q != b_t:
                raise _validation.shape_error(
                    self, arg, f"the batch size of `query`, {b_q}", tensor.shape
                )
        if cache is None:
            return
        if len(query.shape) != 3:
            raise _validation.shape_error(
                self, "query", "(batch, time, features) when a `cache` is given", query.shape
            )
        if self.value_dim != self.key_dim:
            raise ArgumentValueError(_validation.owner_name(self), f'`cache` stores keys and values in one tensor, so it needs value_dim == key_dim. Received key_dim={self.key_dim}, value_dim={self.value_dim}.')
        _masking.check_mask_shape(
            self,
            "cache",
            cache,
            (query.shape[0], 2, None, self.num_heads, self.key_dim),
            kind="projected keys and values",
        )

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
        cache=None,
        cache_update_index=None,
    ):
        if key is None:
            key = value
        self._check_inputs(query, value, key, cache, cache_update_index)
        if cache is None and cache_update_index is not None:
            raise ArgumentValueError(
                self, "`cache_update_index` needs a "
                f"`cache`. Received cache=None, cache_update_index={cache_update_index}."
            )

        # Keras' layer __call__ fills these from implicit masks only when they
        # are None; an explicit mask is combined with the implicit one here.
        query_mask = _masking.logical_and_masks(query_mask, _masking.keras_mask(query))
        if cache is None:
            value_mask = _masking.logical_and_masks(value_mask, _masking.keras_mask(value))
            if key is not value:
                key_mask = _masking.logical_and_masks(key_mask, _masking.keras_mask(key))
        # EinsumDense does not support masking and would warn about a mask on
        # its input, so the implicit masks are lifted for the projections and
        # put back afterwards (the caller's tensors keep them).
        implicit = [(t, _masking.keras_mask(t)) for t in (query, value, key)]
        for tensor, _ in implicit:
            _masking.set_keras_mask(tensor, None)
        query, value, key = (_validation.float_inputs(self, t) for t in (query, value, key))
        try:
            if self._use_gate:
                gate = self._gate_dense(query)
            q = self.query_dense(query)  # (B, T, H, key_dim)
            if cache is None:
                k = self.key_dense(key)  # (B, S, H, key_dim)
                v = self.value_dense(value)  # (B, S, H, value_dim)
            else:
                cache = ops.cast(cache, self.compute_dtype)
                if cache_update_index is not None:
                    k_v = ops.stack([self.key_dense(key), self.value_dense(value)], axis=1)
                    cache = _write_cache(cache, ops.cast(k_v, cache.dtype), cache_update_index)
                k, v = cache[:, 0], cache[:, 1]  # (B, S, H, key_dim)
        finally:
            for tensor, mask in implicit:
                if mask is not None:
                    _masking.set_keras_mask(tensor, mask)

        mask = self._merge_masks(
            q,
            k,
            query_mask,
            value_mask,
            key_mask,
            attention_mask,
            use_causal_mask,
            0 if cache_update_index is None else cache_update_index,
        )
        # Positional, as Keras calls it, so overrides written for Keras work.
        attention_output, scores = self._compute_attention(
            q, k, v, mask, training, return_attention_scores
        )
        if self._use_gate:
            attention_output = ops.multiply(attention_output, gate)
        output = self.output_dense(attention_output)
        if query_mask is not None:
            _masking.set_keras_mask(output, query_mask)

        result = (output, scores) if return_attention_scores else (output,)
        if cache is not None:
            result = result + (cache,)
        return result[0] if len(result) == 1 else result

    def _merge_masks(self, q, k, query_mask, value_mask, key_mask, attention_mask, causal, offset):
        name = f"MultiHeadAttention '{self.name}'"
        rank = len(q.shape)
        batch = q.shape[0]
        if rank != 4:
            # Several attention axes: masks are given already merged, as in Keras.
            if query_mask is not None or value_mask is not None or key_mask is not None:
                raise ArgumentValueError(name, 'query/value/key masks need rank-3 inputs (B, T, dim); pass `attention_mask` for inputs with several attention axes.')
            mask = None if attention_mask is None else ops.cast(attention_mask, "bool")
            if causal or self._sliding_window is not None:
                i, j = self._attention_positions(q, k)
                if causal:
                    mask = _masking.logical_and_masks(mask, ops.greater_equal(i, j))
                if self._sliding_window is not None:
                    window = ops.less(ops.abs(i - j), self._sliding_window)
                    mask = _masking.logical_and_masks(mask, window)
            return mask
        t, s = q.shape[1], k.shape[1]
        _masking.check_mask_shape(name, "query_mask", query_mask, (batch, t))
        _masking.check_mask_shape(name, "value_mask", value_mask, (batch, s))
        _masking.check_mask_shape(name, "key_mask", key_mask, (batch, s))
        if attention_mask is not None and len(attention_mask.shape) == 3:
            _masking.check_mask_shape(
                name, "attention_mask", attention_mask, (batch, t, s), allow_broadcast=True
            )
        mask = _masking.merge_attention_masks(
            ops.shape(q)[1],
            ops.shape(k)[1],
            query_mask=query_mask,
            key_masks=(value_mask, key_mask),
            attention_mask=attention_mask,
            use_causal_mask=causal,
            causal_offset=offset,
        )
        if self._sliding_window is not None:
            i = ops.expand_dims(ops.arange(ops.shape(q)[1]), 1) + ops.cast(offset, "int32")
            j = ops.expand_dims(ops.arange(ops.shape(k)[1]), 0)
            window = ops.less(ops.abs(i - j), self._sliding_window)[None]
            mask = _masking.logical_and_masks(mask, window)
        return mask

    def _attention_positions(self, query, key):
        """Positions `i` `(1, T..., 1...)` of the queries and `j` `(1, 1..., S...)` of
        the keys, counted row-major over the attention axes (one axis: 0..T-1)."""
        axes = self.attention_axes
        q_sizes = [ops.shape(query)[axis] for axis in axes]
        k_sizes = [ops.shape(key)[axis] for axis in axes]
        ones = [1] * len(axes)
        i = ops.reshape(ops.arange(math.prod(q_sizes), dtype="int32"), [1, *q_sizes, *ones])
        j = ops.reshape(ops.arange(math.prod(k_sizes), dtype="int32"), [1, *ones, *k_sizes])
        return i, j

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
    ):
        """Attention over projected `query` `(B, T, H, key_dim)`, `key` and `value`.

        Keras' signature, so that subclasses written for Keras can call and
        override it. `call` folds every mask into `attention_mask`; a caller
        passing `use_causal_mask=True` here gets the causal mask ANDed in.
        Returns `(output, weights)`; the weights are always computed.
        """
        if use_causal_mask:
            i, j = self._attention_positions(query, key)
            attention_mask = _masking.logical_and_masks(attention_mask, ops.greater_equal(i, j))
        # Scaling q (smaller than the scores) first, as Keras does, keeps the
        # two layers numerically identical.
        query = ops.multiply(query, ops.cast(1.0 / math.sqrt(float(self.key_dim)), query.dtype))
        scores = ops.einsum(self._dot_product_equation, key, query)  # (B, H, T, S)
        if attention_mask is not None:
            # (B, T, S) -> (B, 1, T, S): the same mask for every head.
            axis = -len(self.attention_axes) * 2 - 1
            for _ in range(len(scores.shape) - len(attention_mask.shape)):
                attention_mask = ops.expand_dims(attention_mask, axis=axis)
        # Normalised over the key axes, the last len(attention_axes) of the scores.
        rank, n_axes = len(scores.shape), len(self.attention_axes)
        weights = _masking.masked_softmax(
            scores, attention_mask, axis=tuple(range(rank - n_axes, rank))
        )
        dropped = self._dropout_layer(weights, training=training) if self.dropout else weights
        output = ops.einsum(self._combine_equation, dropped, value)  # (B, T, H, value_dim)
        return output, weights

    def compute_output_spec(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
        cache=None,
        cache_update_index=None,
    ):
        output_shape = self.compute_output_shape(
            query.shape, value.shape, None if key is None else key.shape
        )
        result = (keras.KerasTensor(output_shape, dtype=self.compute_dtype),)
        if return_attention_scores:
            source_length = value.shape[1] if cache is None else cache.shape[2]
            scores_shape = (query.shape[0], self.num_heads, query.shape[1], source_length)
            result += (keras.KerasTensor(scores_shape, dtype=self.compute_dtype),)
        if cache is not None:
            result += (keras.KerasTensor(cache.shape, dtype=self.compute_dtype),)
        return result[0] if len(result) == 1 else result
