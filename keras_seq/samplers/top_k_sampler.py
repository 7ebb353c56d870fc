"""`TopKSampler`: a token drawn among the k most probable."""

from __future__ import annotations

from keras_seq._validation import check_positive_int
from keras_seq.samplers.sampler import NEG_INF, Sampler

__all__ = ["TopKSampler"]


class TopKSampler(Sampler):
    """Draws y_t among the ``k`` most probable tokens, from softmax(z_t / T) restricted to them.

    Args:
        k: int ≥ 1, the tokens kept (all of them when the vocabulary is smaller).
        temperature: float T > 0. Default 1.
        seed: int or None (see `Sampler`).

    References:
        Fan, Lewis & Dauphin. Hierarchical Neural Story Generation. ACL 2018.
    """

    def __init__(self, k: int, temperature: float = 1.0, seed: int | None = None):
        super().__init__(temperature, seed)
        self.k = check_positive_int("TopKSampler", "k", k)

    def get_next_token(self, logits, seed):
        import tensorflow as tf

        k = tf.minimum(self.k, tf.shape(logits)[-1])
        kth = tf.math.top_k(logits, k=k).values[:, -1:]  # the k-th largest logit of each row
        kept = tf.where(logits >= kth, logits, NEG_INF)
        return tf.random.stateless_categorical(kept / self.temperature, 1, seed=seed,
                                               dtype=tf.int32)[:, 0]
