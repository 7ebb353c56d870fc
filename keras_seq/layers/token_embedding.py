"""Token embeddings scaled by √d, optionally tied to the output projection."""

from __future__ import annotations

import math

import keras

from keras_seq._validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_seq")
class TokenEmbedding(keras.layers.Layer):
    """Token embedding scaled by √d that can also project back to token logits.

        forward:  x = √d · E[ids]            (Vaswani et al. 2017, section 3.4)
        reverse:  logits = h Eᵀ              (weight tying, Press & Wolf 2017)

    Calling the same layer with ``reverse=True`` shares E between the decoder's
    input embedding and its output projection. Id 0 is padding: the forward
    call emits a Keras mask ``ids != 0`` when ``mask_zero=True``.

    Args:
        vocabulary_size: int, number of token ids V.
        output_dim: int, embedding width d.
        scale: bool, multiply embeddings by √d. Default True.
        mask_zero: bool, id 0 is padding. Default True.
        embeddings_initializer: initializer of E, shape ``(V, d)``. Default
            normal with standard deviation d^-1/2, so that √d·E has unit scale.

    Examples:
        >>> embed = TokenEmbedding(10, 4)
        >>> x = embed(keras.ops.array([[2, 5, 0]]))
        >>> tuple(embed(x, reverse=True).shape)
        (1, 3, 10)

    References:
        Vaswani et al. Attention Is All You Need. NeurIPS 2017.
        Press, Wolf. Using the Output Embedding to Improve Language Models. EACL 2017.
    """

    def __init__(
        self,
        vocabulary_size: int,
        output_dim: int,
        scale: bool = True,
        mask_zero: bool = True,
        embeddings_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocabulary_size = check_positive_int(self, "vocabulary_size", vocabulary_size)
        self.output_dim = check_positive_int(self, "output_dim", output_dim)
        self.scale = bool(scale)
        self.mask_zero = bool(mask_zero)
        if embeddings_initializer is None:
            embeddings_initializer = keras.initializers.RandomNormal(
                stddev=self.output_dim**-0.5
            )
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.supports_masking = True

    def build(self, inputs_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocabulary_size, self.output_dim),
            initializer=self.embeddings_initializer,
        )
        self.built = True

    def call(self, inputs, reverse: bool = False):
        if reverse:
            e = keras.ops.cast(self.embeddings, self.compute_dtype)
            return keras.ops.matmul(inputs, keras.ops.transpose(e))
        x = keras.ops.take(self.embeddings, keras.ops.cast(inputs, "int32"), axis=0)
        x = keras.ops.cast(x, self.compute_dtype)
        if self.scale:
            x = x * math.sqrt(self.output_dim)
        return x

    def compute_mask(self, inputs, mask=None):
        # Only id inputs carry padding; the reverse call keeps the incoming mask.
        if self.mask_zero and "int" in str(inputs.dtype):
            return keras.ops.not_equal(inputs, 0)
        return mask

    def compute_output_spec(self, inputs, reverse: bool = False):
        if reverse:
            shape = tuple(inputs.shape[:-1]) + (self.vocabulary_size,)
        else:
            shape = tuple(inputs.shape) + (self.output_dim,)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "output_dim": self.output_dim,
                "scale": self.scale,
                "mask_zero": self.mask_zero,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config
