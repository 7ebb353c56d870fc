"""The k-max selection over time, in TensorFlow ops: the form `_k_max` uses on
the TensorFlow backend.

Written in TensorFlow ops that the TFLite converter maps to builtins with a
dynamic batch and length, and that tf2onnx maps to ONNX: ``TOPK_V2`` (twice:
once on the values, once on the negated step indices to put the chosen steps
back in time order; both TopKs break ties towards the lower index, in
TensorFlow, TFLite and ONNX alike), ``GATHER`` with batch dimensions, and
``PADV2`` when the sequence is shorter than k. (Indexing with ``None`` is
avoided: a strided slice that adds an axis to an integer or boolean tensor
needs the Flex delegate.)
"""

from __future__ import annotations

import math

import tensorflow as tf


def output_mask(mask: tf.Tensor, k_out, k_per_sequence=None) -> tf.Tensor:
    """``(B, k_out)`` bool: True at the first ``min(k, s)`` positions of each row.

    Args:
        mask: ``(B, T)`` input mask (True = valid step).
        k_out: the output length (int or scalar int32 tensor).
        k_per_sequence: ``(B,)`` int32, each sequence's own k; None: ``k_out``.

    A row keeps ``min(k, s)`` chosen steps, ``s`` its number of valid steps;
    this depends on the mask alone, not on the values.
    """
    s = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)  # (B,)
    k = k_out if k_per_sequence is None else k_per_sequence
    kept = tf.minimum(s, k)
    return tf.expand_dims(tf.range(k_out), 0) < tf.expand_dims(kept, 1)


def k_max_over_time(x, mask, k_out, k_per_sequence=None):
    """For each sequence and feature, the k largest values over time, in time order.

    Args:
        x: ``(B, T, *features)``.
        mask: ``(B, T)`` bool or None; masked steps are never chosen.
        k_out: the output length (int or scalar int32 tensor), >= every k.
        k_per_sequence: ``(B,)`` int32, each sequence's own k (<= ``k_out``);
            None: ``k_out`` for every sequence.

    Returns:
        ``(B, k_out, *features)``: per row, the chosen values in their
        original time order (among equal values the earlier step wins),
        followed by zeros where fewer than k valid steps were available or
        the row's k is smaller than ``k_out``.
    """
    features = x.shape[2:]
    shape = tf.shape(x)
    batch, steps = shape[0], shape[1]
    # The feature count written out, not -1: TFLite's RESHAPE takes at most one
    # unknown size, and batch and steps may already be unknown.
    v = tf.reshape(x, [batch, steps, math.prod(features)])
    v = tf.transpose(v, [0, 2, 1])  # (B, F, T): top_k works on the last axis
    # Masked steps rank below every valid one. The lowest finite value, not
    # -inf: a converter may lower a select to arithmetic, and -inf * 0 is NaN.
    scores = v
    if mask is None:
        valid = tf.ones(tf.stack([batch, steps]), tf.int32)
    else:
        valid = tf.cast(mask, tf.int32)  # (B, T)
        scores = tf.where(tf.expand_dims(tf.cast(mask, tf.bool), 1), v, v.dtype.min)
    # A sequence shorter than k: pad with invalid steps, so that top_k has
    # k candidates; they are never kept.
    pad = tf.maximum(k_out - steps, 0)
    scores = tf.pad(scores, [[0, 0], [0, 0], [0, pad]], constant_values=v.dtype.min)
    v = tf.pad(v, [[0, 0], [0, 0], [0, pad]])
    valid = tf.pad(valid, [[0, 0], [0, pad]])
    padded_steps = steps + pad

    # Largest values first; equal values by increasing step.
    _, index = tf.math.top_k(scores, k_out)  # (B, F, k)
    keep = tf.gather(valid, index, batch_dims=1) > 0
    if k_per_sequence is not None:
        keep = keep & (tf.reshape(tf.range(k_out), [1, 1, -1])
                       < tf.reshape(k_per_sequence, [-1, 1, 1]))
    # Back to time order, the steps not kept last: sort the step indices
    # ascending (TopK of their negation; kept indices are distinct).
    key = tf.where(keep, index, padded_steps)
    negated, _ = tf.math.top_k(-key, k_out)
    index = -negated
    keep = index < padded_steps
    index = tf.minimum(index, padded_steps - 1)
    out = tf.gather(v, index, batch_dims=2)  # (B, F, k)
    out = tf.where(keep, out, tf.zeros_like(out))
    out = tf.transpose(out, [0, 2, 1])  # (B, k, F)
    return tf.reshape(out, [batch, k_out, *features])
