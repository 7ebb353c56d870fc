"""Monotonic attention (Raffel et al. 2017): an alignment that only moves forward.

`monotonic_attention` computes one step's alignment; `BahdanauMonotonicAttention`
and `LuongMonotonicAttention` put it on those layers' energies.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_seq._validation import check_choice, check_float, shape_error
from keras_seq.layers.attention import _masking
from keras_seq.layers.attention.bahdanau_attention import BahdanauAttention
from keras_seq.layers.attention.luong_attention import LuongAttention
from keras_seq.layers.recurrent.linear_recurrence import linear_recurrence

__all__ = ["MONOTONIC_MODES", "BahdanauMonotonicAttention", "LuongMonotonicAttention",
           "monotonic_attention"]

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


class _MonotonicAttention:
    """Monotonic attention over an attention layer's energy (a mixin).

    One decoder step at a time: ``p = σ(e + r + noise)`` with ``e`` the
    layer's score of the query against every key, ``r`` the trainable scalar
    ``score_bias`` and, in training only, noise drawn from N(0,
    ``sigmoid_noise``²) (Raffel et al.'s way to push p towards 0 or 1); the
    alignment is `monotonic_attention` of p and the previous step's
    alignment, and the context Σ_j α_j v_j.
    """

    def _init_monotonic(self, sigmoid_noise, score_bias_init, mode, seed):
        self.sigmoid_noise = check_float(self, "sigmoid_noise", sigmoid_noise, low=0.0)
        self.score_bias_init = check_float(self, "score_bias_init", score_bias_init)
        self.mode = check_choice(self, "mode", mode, MONOTONIC_MODES)
        self.seed_generator = keras.random.SeedGenerator(seed)

    def build(self, query_shape, value_shape, key_shape=None):
        super().build(query_shape, value_shape, key_shape)
        self.score_bias = self.add_weight(
            name="score_bias", shape=(),
            initializer=keras.initializers.Constant(self.score_bias_init))

    def initial_alignments(self, value):
        """The alignment before the first step: all at the first memory position, ``(B, Tk)``."""
        batch, length = ops.shape(value)[0], ops.shape(value)[1]
        first = ops.cast(ops.equal(ops.arange(length), 0), self.compute_dtype)
        return ops.broadcast_to(ops.expand_dims(first, 0), (batch, length))

    def call(self, query, value, previous_alignments, key=None, value_mask=None, training=None,
             processed_key=None, mode=None):
        mode = self.mode if mode is None else check_choice(self, "mode", mode, MONOTONIC_MODES)
        value_mask = _masking.logical_and_masks(value_mask, _masking.keras_mask(value))
        if len(query.shape) != 2:
            raise shape_error(self, "query", "one decoder step (B, dq)", query.shape)
        previous_alignments = ops.convert_to_tensor(previous_alignments)
        if len(previous_alignments.shape) != 2:
            raise shape_error(self, "previous_alignments", "(B, Tk)", previous_alignments.shape)
        query = ops.expand_dims(query, 1)
        self._check_call(query, value, key, processed_key, None, value_mask)
        if processed_key is None:
            processed_key = self.precompute_keys(value if key is None else key)
        energy = self.score(query, processed_key)[:, 0] + ops.cast(self.score_bias, query.dtype)
        if training and self.sigmoid_noise > 0.0:
            energy = energy + keras.random.normal(
                ops.shape(energy), stddev=self.sigmoid_noise, dtype=energy.dtype,
                seed=self.seed_generator)
        p_choose = ops.sigmoid(energy)
        if value_mask is not None:  # never stop at padding
            p_choose = ops.where(ops.cast(value_mask, "bool"), p_choose, 0.0)
        alignments = monotonic_attention(p_choose, previous_alignments, mode)
        context = ops.matmul(ops.expand_dims(alignments, 1), ops.cast(value, alignments.dtype))
        return context[:, 0], alignments

    def compute_output_spec(self, query, value, previous_alignments, key=None, value_mask=None,
                            training=None, processed_key=None, mode=None):
        batch = query.shape[0]
        return (keras.KerasTensor((batch, value.shape[-1]), dtype=self.compute_dtype),
                keras.KerasTensor((batch, value.shape[1]), dtype=self.compute_dtype))

    def get_config(self):
        config = {**super().get_config(), "sigmoid_noise": self.sigmoid_noise,
                  "score_bias_init": self.score_bias_init, "mode": self.mode}
        config.pop("dropout", None)  # no dropout on a monotonic alignment
        return config


@keras.saving.register_keras_serializable(package="keras_seq")
class BahdanauMonotonicAttention(_MonotonicAttention, BahdanauAttention):
    """Bahdanau attention made monotonic (Raffel et al. 2017).

    The energy is `BahdanauAttention`'s, e_j = vᵀ tanh(W_q q + W_k k_j)
    (weight-normalised with ``normalize``), plus the scalar ``score_bias``;
    p_j = σ(e_j + noise) and the alignment is `monotonic_attention` of p and
    the previous step's alignment. Weights: `BahdanauAttention`'s, then
    ``score_bias ()`` (starts at ``score_bias_init``).

    Args:
        units: int, width of the additive score layer.
        normalize: bool, the weight-normalised score (default False).
        sigmoid_noise: float ≥ 0, standard deviation of the noise added to
            the energy in training (default 0).
        score_bias_init: float, the initial ``score_bias`` (Raffel et al.
            start it negative, e.g. −4, so that early on the decoder moves on
            rarely). Default 0.
        mode: ``"parallel"`` (default), ``"recursive"`` or ``"hard"``: the
            mode of `monotonic_attention`; a call may pass another (decoding
            uses ``"hard"``).
        seed: int or None, seed of the noise.

    Call arguments:
        query: one decoder step ``(B, dq)``.
        value: the memory ``(B, Tk, dv)``; key: ``(B, Tk, dk)``, defaults to value.
        previous_alignments: ``(B, Tk)``; before the first step
            `initial_alignments` (a one-hot at position 0).
        value_mask: ``(B, Tk)``; the decoder never stops at a masked
            position. Defaults to the implicit Keras mask of ``value``.
        training: enables the noise.
        processed_key: `precompute_keys`' result, reused across steps.
        mode: overrides the layer's mode for this call.

    Returns:
        ``(context (B, dv), alignments (B, Tk))``.

    Examples:
        >>> import numpy as np
        >>> attention = BahdanauMonotonicAttention(8, score_bias_init=-1.0)
        >>> memory = np.random.rand(2, 5, 4).astype("float32")
        >>> query = np.random.rand(2, 6).astype("float32")
        >>> attention.build((None, 6), (None, None, 4))
        >>> context, alignments = attention(query, memory, attention.initial_alignments(memory))
        >>> tuple(context.shape), tuple(alignments.shape)
        ((2, 4), (2, 5))

    References:
        Raffel, Luong, Liu, Weiss & Eck. Online and Linear-Time Attention by
        Enforcing Monotonic Alignments. ICML 2017.
    """

    def __init__(self, units: int, normalize: bool = False, sigmoid_noise: float = 0.0,
                 score_bias_init: float = 0.0, mode: str = "parallel",
                 seed: int | None = None, **kwargs):
        super().__init__(units, normalize=normalize, seed=seed, **kwargs)
        self._init_monotonic(sigmoid_noise, score_bias_init, mode, seed)


@keras.saving.register_keras_serializable(package="keras_seq")
class LuongMonotonicAttention(_MonotonicAttention, LuongAttention):
    """Luong attention made monotonic (Raffel et al. 2017).

    The energy is `LuongAttention`'s, e_j = (g) q · (k_j W_a), plus the
    scalar ``score_bias``; p_j = σ(e_j + noise) and the alignment is
    `monotonic_attention` of p and the previous step's alignment. Weights:
    `LuongAttention`'s, then ``score_bias ()`` (starts at
    ``score_bias_init``). Arguments, call arguments and outputs as
    `BahdanauMonotonicAttention`, with `LuongAttention`'s ``units`` (the
    query width) and ``use_scale`` in place of ``units`` and ``normalize``.

    References:
        Raffel, Luong, Liu, Weiss & Eck. Online and Linear-Time Attention by
        Enforcing Monotonic Alignments. ICML 2017.
    """

    def __init__(self, units: int | None = None, use_scale: bool = False,
                 sigmoid_noise: float = 0.0, score_bias_init: float = 0.0,
                 mode: str = "parallel", seed: int | None = None, **kwargs):
        super().__init__(units, use_scale=use_scale, seed=seed, **kwargs)
        self._init_monotonic(sigmoid_noise, score_bias_init, mode, seed)
