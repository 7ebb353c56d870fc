"""Masking for every attention layer: one module, shared by all of them.

Masks are boolean, ``True`` = keep. An attention mask has shape ``(B, T, S)``
(query positions by key positions), or any shape that broadcasts to it
(``(B, 1, S)`` for a key padding mask, ``(B, T, 1)`` for a query mask,
``(1, T, S)`` for a causal mask).

The softmax always runs in float32: under ``mixed_float16`` a float16 softmax
both loses precision and cannot hold the usual ``-1e9`` fill (float16 tops out
at 65504, so ``-1e9`` becomes ``-inf`` and ``-inf - -inf`` is NaN). Masked
positions get zero weight afterwards, so a row with every key masked returns
all-zero weights (and hence a finite, zero context) instead of NaN or a
uniform average over padding.
"""

from __future__ import annotations

from collections.abc import Sequence

from keras import backend, ops

# Keras 3 keeps implicit masks on tensors; these two accessors are not exported
# publicly, and every attention layer reads masks through this module only.
from keras.src.backend.common.masking import get_keras_mask as keras_mask  # noqa: F401
from keras.src.backend.common.masking import set_keras_mask  # noqa: F401

from keras_seq import _validation
from keras_seq.layers.recurrent import backend as recurrent_backend

# How far below the smallest kept logit an integer export fills a masked one.
INTEGER_MASK_MARGIN = 12.0


def large_negative(dtype) -> float:
    """A large negative logit that stays finite in `dtype`.

    float16's largest magnitude is 65504, so it gets -3e4 (as Keras does);
    float32 and bfloat16 share float32's exponent range and take -1e9.
    """
    if backend.standardize_dtype(dtype) == "float16":
        return -3.0e4
    return -1.0e9


def check_mask_shape(
    owner,
    argument: str,
    mask,
    expected: Sequence[int | None],
    allow_broadcast: bool = False,
    kind: str = "boolean, True = keep",
) -> None:
    """Raises a ValueError naming the layer and argument if `mask` has the wrong shape.

    Args:
        owner: the calling layer (or its name), for the message.
        argument: name of the call argument holding `mask`.
        mask: the mask tensor (or None, which is accepted).
        expected: the expected shape; `None` entries match any size, and a
            size that is not statically known in `mask` is not checked.
        allow_broadcast: also accept size 1 wherever a size is expected.
        kind: what the tensor holds, for the message.
    """
    if mask is None:
        return
    shape = tuple(mask.shape)
    expected = tuple(expected)
    if len(shape) != len(expected) or any(
        e is not None and s is not None and s != e and not (allow_broadcast and s == 1)
        for s, e in zip(shape, expected)
    ):
        pretty = "(" + ", ".join("?" if e is None else str(e) for e in expected) + ")"
        raise _validation.shape_error(owner, argument, f"{pretty} ({kind})", shape)


def causal_mask(query_length, key_length, offset=0):
    """Lower-triangular mask of shape `(1, T, S)`.

    Query `i` sits at absolute position `offset + i` and may see key `j` iff
    `j <= offset + i`. `offset` may be a tensor (the cache index while
    decoding), so one traced graph serves every decoding step.
    """
    i = ops.expand_dims(ops.arange(query_length, dtype="int32"), 1)
    i = i + ops.cast(offset, "int32")
    j = ops.expand_dims(ops.arange(key_length, dtype="int32"), 0)
    return ops.expand_dims(ops.greater_equal(i, j), 0)


def logical_and_masks(*masks):
    """Broadcasting logical AND of the masks that are not None (None if all are)."""
    merged = None
    for mask in masks:
        if mask is None:
            continue
        mask = ops.cast(mask, "bool")
        merged = mask if merged is None else ops.logical_and(merged, mask)
    return merged


def merge_attention_masks(
    query_length,
    key_length,
    query_mask=None,
    key_masks: Sequence = (),
    attention_mask=None,
    use_causal_mask: bool = False,
    causal_offset=0,
):
    """Merges every kind of mask into one boolean `(B|1, T, S)` mask, or None.

    Args:
        query_length: T, the number of query positions.
        key_length: S, the number of key positions.
        query_mask: `(B, T)`; a masked query row attends to nothing (its
            weights are all zero), as in `keras.layers.MultiHeadAttention`.
        key_masks: `(B, S)` masks over keys (padding, value and key masks).
        attention_mask: `(B, T, S)`.
        use_causal_mask: add `causal_mask(T, S, causal_offset)`.
        causal_offset: absolute position of query 0 (cache index while decoding).
    """
    parts = []
    if query_mask is not None:
        parts.append(ops.expand_dims(ops.cast(query_mask, "bool"), -1))  # (B, T, 1)
    for mask in key_masks:
        if mask is not None:
            parts.append(ops.expand_dims(ops.cast(mask, "bool"), -2))  # (B, 1, S)
    if attention_mask is not None:
        parts.append(attention_mask)
    if use_causal_mask:
        parts.append(causal_mask(query_length, key_length, causal_offset))
    return logical_and_masks(*parts)


def masked_softmax(logits, mask=None, axis: int | Sequence[int] = -1):
    """Softmax over `axis` in float32 with masked positions at exactly zero.

    Args:
        logits: scores of any float dtype.
        mask: boolean, broadcastable to `logits`; True = keep.
        axis: axis or axes to normalise over.

    Returns:
        Weights in the dtype of `logits`. Rows with every position masked are
        all zeros (finite), not NaN.
    """
    dtype = logits.dtype
    x = ops.cast(logits, "float32")
    if mask is not None:
        mask = ops.cast(mask, "bool")
        fill = large_negative("float32")
        if getattr(recurrent_backend.export_lowering(), "integer", False):
            # An integer export: -1e9 would stretch the logits' int8 range
            # until every kept logit is one value. Just below the smallest
            # kept logit instead (e^-INTEGER_MASK_MARGIN of the weight; the
            # masked weights are set to zero below).
            axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
            kept_min = ops.min(ops.where(mask, x, ops.max(x)), axis=axes, keepdims=True)
            fill = kept_min - INTEGER_MASK_MARGIN
        x = ops.where(mask, x, fill)
    if isinstance(axis, (list, tuple)) and len(axis) > 1:
        weights = ops.exp(x - ops.logsumexp(x, axis=tuple(axis), keepdims=True))
    else:
        axis = axis[0] if isinstance(axis, (list, tuple)) else axis
        weights = ops.softmax(x, axis=axis)
    if mask is not None:
        # A fully masked row would otherwise be a uniform average over padding.
        weights = ops.where(mask, weights, 0.0)
    return ops.cast(weights, dtype)
