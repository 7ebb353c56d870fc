"""`RandomSampler`: a token drawn from the whole distribution."""

from __future__ import annotations

from keras_seq.samplers.sampler import Sampler

__all__ = ["RandomSampler"]


class RandomSampler(Sampler):
    """Draws y_t ~ softmax(z_t / T) over the whole vocabulary (KerasHub's ``RandomSampler``).

    Args:
        temperature: float T > 0. Default 1 (the model's distribution).
        seed: int or None (see `Sampler`).
    """

    def get_next_token(self, logits, seed):
        import tensorflow as tf

        return tf.random.stateless_categorical(logits / self.temperature, 1, seed=seed,
                                               dtype=tf.int32)[:, 0]
