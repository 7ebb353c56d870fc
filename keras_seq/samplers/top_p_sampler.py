"""`TopPSampler`: a token drawn from the smallest set of probability at least p."""

from __future__ import annotations

from keras_seq._validation import check_float
from keras_seq.samplers.sampler import NEG_INF, Sampler

__all__ = ["TopPSampler"]


class TopPSampler(Sampler):
    """Nucleus sampling: y_t drawn from the most probable tokens whose probabilities sum to ``p``.

    The tokens are taken in decreasing probability of softmax(z_t / T) until
    their sum reaches ``p`` (the one that crosses it included, so at least
    one token is kept), and y_t is drawn from them in proportion.

    Args:
        p: float in (0, 1].
        temperature: float T > 0. Default 1.
        seed: int or None (see `Sampler`).

    References:
        Holtzman et al. The Curious Case of Neural Text Degeneration. ICLR 2020.
    """

    def __init__(self, p: float, temperature: float = 1.0, seed: int | None = None):
        super().__init__(temperature, seed)
        self.p = check_float("TopPSampler", "p", p, low=0.0, high=1.0, low_inclusive=False)

    def get_next_token(self, logits, seed):
        import tensorflow as tf

        scaled = logits / self.temperature
        order = tf.argsort(scaled, axis=-1, direction="DESCENDING", stable=True)
        sorted_logits = tf.gather(scaled, order, batch_dims=1)
        probabilities = tf.nn.softmax(sorted_logits)
        before = tf.cumsum(probabilities, axis=-1, exclusive=True)  # mass of the tokens before
        kept = tf.where(before < self.p, sorted_logits, NEG_INF)
        chosen = tf.random.stateless_categorical(kept, 1, seed=seed, dtype=tf.int32)  # (B, 1)
        return tf.gather(order, chosen, batch_dims=1)[:, 0]
