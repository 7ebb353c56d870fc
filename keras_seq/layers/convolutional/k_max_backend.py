"""The k-max selection over time shared by `KMaxPooling` and `DynamicKMaxPooling`.

Two forms of the same function, chosen once, at the bottom of this module:

- on the TensorFlow backend, `_k_max_tf`: TensorFlow ops that the TFLite
  converter and tf2onnx map to builtins (two TopKs and a batched gather);
- on every other backend, the `keras.ops` form here. It ranks the steps by
  counting, for each step, the valid steps that beat it (a larger value, or an
  equal value at an earlier step), so the tie rule holds whatever sort or
  TopK a backend has; then it sorts keys that are all distinct. The ranking
  compares every pair of steps, ``(B, F, T, T)`` booleans.
"""

from __future__ import annotations

import math

import keras
from keras import ops


def output_mask_in_ops(mask, k_out, k_per_sequence=None):
    """``(B, k_out)`` bool: True at the first ``min(k, s)`` positions of each row.

    Args:
        mask: ``(B, T)`` input mask (True = valid step).
        k_out: the output length (int or scalar int32 tensor).
        k_per_sequence: ``(B,)`` int32, each sequence's own k; None: ``k_out``.

    A row keeps ``min(k, s)`` chosen steps, ``s`` its number of valid steps;
    this depends on the mask alone, not on the values.
    """
    s = ops.sum(ops.cast(mask, "int32"), axis=1)  # (B,)
    k = k_out if k_per_sequence is None else ops.cast(k_per_sequence, "int32")
    kept = ops.minimum(s, k)
    return ops.expand_dims(ops.arange(k_out, dtype="int32"), 0) < ops.expand_dims(kept, 1)


def k_max_over_time_in_ops(x, mask, k_out, k_per_sequence=None):
    """For each sequence and feature, the k largest values over time, in time order.

    Args:
        x: ``(B, T, *features)``.
        mask: ``(B, T)`` bool or None; masked steps are never chosen.
        k_out: the output length (int), >= every k.
        k_per_sequence: ``(B,)`` int32, each sequence's own k (<= ``k_out``);
            None: ``k_out`` for every sequence.

    Returns:
        ``(B, k_out, *features)``: per row, the chosen values in their
        original time order (among equal values the earlier step wins),
        followed by zeros where fewer than k valid steps were available or
        the row's k is smaller than ``k_out``.
    """
    features = tuple(x.shape[2:])
    batch, steps = ops.shape(x)[0], ops.shape(x)[1]
    v = ops.reshape(x, (batch, steps, math.prod(features)))
    v = ops.transpose(v, (0, 2, 1))  # (B, F, T)
    if mask is None:
        valid = ops.ones((batch, 1, steps), "bool")
    else:
        valid = ops.expand_dims(ops.cast(mask, "bool"), 1)  # (B, 1, T)

    # rank[b, f, t]: the valid steps s that beat step t (B, F, T)
    t = ops.arange(steps, dtype="int32")
    earlier = ops.expand_dims(t, 1) > ops.expand_dims(t, 0)  # (T, T): [t, s] = s < t
    v_t, v_s = ops.expand_dims(v, 3), ops.expand_dims(v, 2)  # (B, F, T, 1), (B, F, 1, T)
    beats = ops.logical_or(v_s > v_t, ops.logical_and(v_s == v_t, earlier))
    beats = ops.logical_and(beats, ops.expand_dims(valid, 2))  # (B, F, T, T)
    rank = ops.sum(ops.cast(beats, "int32"), axis=3)
    if k_per_sequence is None:
        k = k_out
    else:
        k = ops.reshape(ops.cast(k_per_sequence, "int32"), (-1, 1, 1))
    keep = ops.logical_and(valid, rank < k)  # (B, F, T)

    # The kept steps first, in time order. The keys are distinct, so a stable
    # and an unstable sort agree.
    key = ops.where(keep, t, t + steps)
    index = ops.argsort(key, axis=-1)[..., :k_out]  # (B, F, min(T, k_out))
    out = ops.take_along_axis(v, index, axis=-1)
    out = ops.where(ops.take_along_axis(keep, index, axis=-1), out, ops.zeros_like(out))
    # A sequence shorter than k: zeros after its steps.
    out = ops.pad(out, ((0, 0), (0, 0), (0, max(k_out - steps, 0))))  # (B, F, k_out)
    out = ops.transpose(out, (0, 2, 1))  # (B, k_out, F)
    return ops.reshape(out, (batch, k_out, *features))


# The one place the form is chosen: TensorFlow keeps the ops that convert to
# TFLite builtins; the other backends (whose tensors TensorFlow ops reject,
# as JAX tracers) use the `keras.ops` form.
if keras.backend.backend() == "tensorflow":
    from keras_seq.layers.convolutional.k_max_tensorflow import k_max_over_time, output_mask
else:
    k_max_over_time, output_mask = k_max_over_time_in_ops, output_mask_in_ops

__all__ = ["k_max_over_time", "k_max_over_time_in_ops", "output_mask", "output_mask_in_ops"]
