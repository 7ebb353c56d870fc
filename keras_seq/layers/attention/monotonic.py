"""Monotonic alignment (Raffel et al. 2017): attention that only moves forward."""

from __future__ import annotations

from keras import ops

from keras_seq._validation import check_choice
from keras_seq.layers.recurrent.linear_recurrence import linear_recurrence

__all__ = ["MONOTONIC_MODES", "monotonic_attention"]

MONOTONIC_MODES = ("recursive", "parallel", "hard")
"""The modes of `monotonic_attention`."""

# log(1 - p) is taken of at least this, so that p = 1 gives a product of
# about 1e-30 (zero, to the precision of an alignment) instead of log(0).
_SMALLEST_FACTOR = 1e-30


def monotonic_attention(p_choose, previous_alignments, mode: str = "recursive"):
    """The alignment of one output step under monotonic attention.

    At output step i the decoder scans the memory left to right from where
    it stopped at step i − 1, and stops at position j with probability
    ``p_choose[:, j]`` (Raffel, Luong, Liu, Weiss & Eck 2017). In training
    the alignment is the expectation of where it stops:

        α_ij = p_ij Σ_{k ≤ j} α_{i−1,k} Π_{l=k}^{j−1} (1 − p_il)

    - ``"recursive"``: that sum as the recurrence
      q_ij = (1 − p_{i,j−1}) q_{i,j−1} + α_{i−1,j}, α_ij = p_ij q_ij, one
      step per memory position (`keras_seq.layers.linear_recurrence`);
    - ``"parallel"``: the same sum for every position at once, through the
      ``(S, S)`` matrix of the products Π_{l=k}^{j−1} (1 − p_il), each a sum
      of logs that starts at its own k (memory B·S²). Raffel et al.'s
      closed form divides by cumulative products of (1 − p) and needs
      them clipped where they underflow; this one divides by nothing, so
      it equals the recursive form at any length and on p = 1;
    - ``"hard"``: what decoding does: a one-hot alignment at the first
      position j at or after the previous alignment's position (for a soft
      one, where its cumulative sum passes 1/2) with p_ij > 0.5, zeros when
      there is none (the decoder has read past the end of the memory and
      attends to nothing). The scan starts at the previous position, as in
      the paper (TensorFlow Addons' hard mode scans from the first
      position, so that a chosen position before the previous one wipes
      the alignment out). On p in {0, 1} and a one-hot previous alignment,
      the three modes agree.

    Args:
        p_choose: ``(B, S)`` probabilities of stopping at each memory
            position (``σ(energy)``; in ``"hard"`` mode only p > 0.5 counts).
        previous_alignments: ``(B, S)`` the alignment of the previous output
            step; at the first step a one-hot at position 0.
        mode: ``"recursive"`` (default), ``"parallel"`` or ``"hard"``.

    Returns:
        ``(B, S)`` alignments, in the dtype of ``p_choose``. Each row sums to
        at most 1 (what is missing is the probability of reading past the end).

    Examples:
        >>> import numpy as np
        >>> p = np.array([[0.0, 1.0, 1.0, 0.0]], "float32")
        >>> start = np.array([[1.0, 0.0, 0.0, 0.0]], "float32")
        >>> np.asarray(monotonic_attention(p, start, "hard")).tolist()
        [[0.0, 1.0, 0.0, 0.0]]
        >>> np.asarray(monotonic_attention(p, start, "recursive")).tolist()
        [[0.0, 1.0, 0.0, 0.0]]
    """
    mode = check_choice("monotonic_attention", "mode", mode, MONOTONIC_MODES)
    p_choose = ops.convert_to_tensor(p_choose)
    previous_alignments = ops.cast(previous_alignments, p_choose.dtype)
    if mode == "hard":
        return _hard(p_choose, previous_alignments)
    if mode == "parallel":
        return _parallel(p_choose, previous_alignments)
    # q_j = (1 - p_{j-1}) q_{j-1} + α_{i-1,j}: a linear recurrence over j.
    carried = ops.concatenate(
        [ops.ones_like(p_choose[:, :1]), 1.0 - p_choose[:, :-1]], axis=1)
    q = linear_recurrence(ops.expand_dims(carried, -1), ops.expand_dims(previous_alignments, -1),
                          ops.zeros_like(p_choose[:, :1]))
    return p_choose * q[:, :, 0]


def _parallel(p_choose, previous_alignments):
    dtype = p_choose.dtype
    if dtype in ("float16", "bfloat16"):  # 1e-30 is zero in 16 bits
        p_choose = ops.cast(p_choose, "float32")
        previous_alignments = ops.cast(previous_alignments, "float32")
    logs = ops.log(ops.maximum(1.0 - p_choose, _SMALLEST_FACTOR))  # (B, S)
    positions = ops.arange(ops.shape(p_choose)[1])
    # [k, l]: position l counts for the products that start at k.
    from_start = ops.expand_dims(positions, 0) >= ops.expand_dims(positions, 1)
    started = ops.where(ops.expand_dims(from_start, 0), ops.expand_dims(logs, 1), 0.0)
    # Σ_{l=k}^{j-1} log(1 - p_l) at [k, j]: an exclusive cumulative sum.
    exclusive = ops.cumsum(started, axis=2) - started
    products = ops.where(ops.expand_dims(from_start, 0), ops.exp(exclusive), 0.0)
    reached = ops.einsum("bk,bkj->bj", previous_alignments, products)
    return ops.cast(p_choose * reached, dtype)


def _hard(p_choose, previous_alignments):
    chosen = ops.cast(p_choose > 0.5, p_choose.dtype)
    # The positions at or after the previous alignment's (none for zeros).
    reached = ops.cast(ops.cumsum(previous_alignments, axis=1) > 0.5, p_choose.dtype)
    candidates = chosen * reached
    # The first candidate: no candidate before it.
    before = ops.cumsum(candidates, axis=1) - candidates
    return candidates * ops.cast(before < 0.5, p_choose.dtype)
