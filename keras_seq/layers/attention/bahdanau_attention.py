"""Additive (Bahdanau) attention with optional weight normalisation."""

from __future__ import annotations

import math

import keras
from keras import ops

from keras_seq import _validation
from keras_seq.layers.attention._key_value_attention import KeyValueAttention


@keras.saving.register_keras_serializable(package="keras_seq")
class BahdanauAttention(KeyValueAttention):
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
        super().__init__(dropout=dropout, seed=seed, **kwargs)
        self.units = _validation.check_positive_int(self, "units", units)
        self.normalize = _validation.check_bool(self, "normalize", normalize)

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        self.check_known_widths(query_shape, value_shape, key_shape)
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

    def query_width(self) -> int:
        return self.query_kernel.shape[0]

    def score(self, query, processed_key):
        """e_ij = vᵀ tanh(W_q q_i + W_k k_j) (weight-normalised with ``normalize``)."""
        processed_query = ops.matmul(query, self.query_kernel)  # W_q q, (B, Tq, units)
        h = ops.expand_dims(processed_query, 2) + ops.expand_dims(processed_key, 1)
        v = self.score_vector
        if self.normalize:
            h = h + self.normalizer_bias
            v = self.normalizer_gain * v / ops.sqrt(ops.sum(ops.square(v)))
        return ops.sum(ops.tanh(h) * v, axis=-1)  # (B, Tq, Tk)

    def get_config(self):
        return {**super().get_config(), "units": self.units, "normalize": self.normalize}
