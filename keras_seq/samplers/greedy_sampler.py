"""`GreedySampler`: the most probable token at each step."""

from __future__ import annotations

from keras_seq.samplers.sampler import Sampler

__all__ = ["GreedySampler"]


class GreedySampler(Sampler):
    """Greedy decoding: y_t = argmax_y p(y | y_<t, x), the most probable token each step.

    Examples:
        >>> import tensorflow as tf
        >>> from keras_seq import decoding, models, samplers
        >>> model = models.rnn_seq2seq(20, 12, units=8, embedding_dim=4)
        >>> ids = samplers.GreedySampler()(decoding.decoder_steps(model), tf.constant([[5, 6]]),
        ...                                max_length=4)
        >>> tuple(ids.shape)
        (1, 4)
    """

    def __init__(self):
        super().__init__()

    def get_next_token(self, logits, seed):
        import tensorflow as tf

        return tf.argmax(logits, axis=-1, output_type=tf.int32)
