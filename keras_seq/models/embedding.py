"""Token embeddings for the Transformer builders, optionally tied to the output."""

from __future__ import annotations

import math

import keras

from keras_seq._validation import check_positive_int, invalid_value


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


@keras.saving.register_keras_serializable(package="keras_seq")
class PaddingMask(keras.layers.Layer):
    """Boolean padding mask ``ids != pad_id`` as an explicit model tensor.

    Examples:
        >>> mask = PaddingMask()(keras.ops.array([[4, 0]]))
        >>> keras.ops.convert_to_numpy(mask).tolist()
        [[True, False]]
    """

    def __init__(self, pad_id: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.pad_id = int(pad_id)

    def call(self, inputs):
        return keras.ops.not_equal(inputs, self.pad_id)

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(inputs.shape, dtype="bool")

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}


def embed_positions(ids, vocabulary_size: int, model_dim: int, dropout: float, prefix: str):
    """The input stage of the Transformer builders: dropout(√d · E[ids] + P).

    Creates the layers ``{prefix}_embedding`` (a `TokenEmbedding`, returned so
    that the output projection can be tied to it), ``{prefix}_position`` and
    ``{prefix}_dropout``.

    Returns:
        ``(x, embedding)``: the ``(B, T, model_dim)`` tensor and the embedding layer.
    """
    from keras_seq.layers import SinusoidalPositionalEncoding

    embedding = TokenEmbedding(vocabulary_size, model_dim, name=f"{prefix}_embedding")
    x = SinusoidalPositionalEncoding(name=f"{prefix}_position")(embedding(ids))
    return keras.layers.Dropout(dropout, name=f"{prefix}_dropout")(x), embedding


def check_num_heads(owner, width_argument: str, width: int, num_heads) -> int:
    """``num_heads`` as an int if it is positive and divides the model width."""
    num_heads = check_positive_int(owner, "num_heads", num_heads)
    if width % num_heads:
        raise invalid_value(
            owner, "num_heads", f"a number that divides `{width_argument}` ({width})", num_heads
        )
    return num_heads
