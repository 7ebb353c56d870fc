"""The input stage of the Transformer builders: embeddings and positions."""

from __future__ import annotations

import keras

from keras_seq._validation import check_positive_int, invalid_value
from keras_seq.layers import SinusoidalPositionalEncoding, TokenEmbedding


def embed_positions(ids, vocabulary_size: int, model_dim: int, dropout: float, prefix: str):
    """The input stage of the Transformer builders: dropout(√d · E[ids] + P).

    Creates the layers ``{prefix}_embedding`` (a `keras_seq.layers.TokenEmbedding`,
    returned so that the output projection can be tied to it),
    ``{prefix}_position`` and ``{prefix}_dropout``.

    Returns:
        ``(x, embedding, position)``: the ``(B, T, model_dim)`` tensor, the
        embedding layer and the position layer.
    """
    embedding = TokenEmbedding(vocabulary_size, model_dim, name=f"{prefix}_embedding")
    position = SinusoidalPositionalEncoding(name=f"{prefix}_position")
    x = position(embedding(ids))
    return keras.layers.Dropout(dropout, name=f"{prefix}_dropout")(x), embedding, position


def check_num_heads(owner, width_argument: str, width: int, num_heads) -> int:
    """``num_heads`` as an int if it is positive and divides the model width."""
    num_heads = check_positive_int(owner, "num_heads", num_heads)
    if width % num_heads:
        raise invalid_value(
            owner, "num_heads", f"a number that divides `{width_argument}` ({width})", num_heads
        )
    return num_heads
