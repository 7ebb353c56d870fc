"""Multiplicative (Luong, "general") attention."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq import _validation
from keras_seq.layers.attention._key_value_attention import KeyValueAttention


@keras.saving.register_keras_serializable(package="keras_seq")
class LuongAttention(KeyValueAttention):
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
        super().__init__(dropout=dropout, seed=seed, **kwargs)
        self.units = _validation.check_positive_int(self, "units", units, allow_none=True)
        self.use_scale = _validation.check_bool(self, "use_scale", use_scale)

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        self.check_known_widths(query_shape, value_shape, key_shape)
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

    def query_width(self) -> int:
        return self.key_kernel.shape[1]

    def score(self, query, processed_key):
        """e_ij = (g) q_i · (k_j W_a), with ``processed_key`` = k W_a."""
        kW = ops.cast(processed_key, query.dtype)  # (B, Tk, dq)
        e = ops.matmul(query, ops.transpose(kW, (0, 2, 1)))  # (B, Tq, Tk)
        return e * self.scale if self.use_scale else e

    def get_config(self):
        return {**super().get_config(), "units": self.units, "use_scale": self.use_scale}
