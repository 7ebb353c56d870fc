"""ELMo's bidirectional language model and its contextual embedder (Peters et al. 2018)."""

from __future__ import annotations

import keras

from keras_seq._validation import check_positive_int, check_rate, invalid_type, invalid_value
from keras_seq.layers.recurrent.registry import check_cell, recurrent_layer
from keras_seq.tasks import BidirectionalLM, as_task
from keras_seq.tasks.task import forget_calls


def bidirectional_language_model(
    vocabulary_size: int,
    num_layers: int = 2,
    units: int = 128,
    cell: str = "coupled",
    embedding_dim: int | None = None,
    dropout: float = 0.0,
) -> keras.Model:
    """ELMo's biLM: a forward and a backward recurrent language model with one softmax.

    The model is a `keras_seq.tasks.BidirectionalLM`, whose docstring has its
    equations: the backward stack reads each row reversed from its last real
    token (padding at the end of a row only, never read), and the two
    directions share the token embedding (and projection, only when
    ``embedding_dim != units``) and the softmax layer ``W_s`` (one
    ``Dense``), as in ELMo. With ``dropout > 0``, dropout is applied to the input of every recurrent
    layer and to the top outputs before the softmax.

    Layers, by name: ``"token_embedding"``, ``"token_projection"`` (a linear
    ``Dense(units)`` with bias, only when ``embedding_dim != units``; it is
    trained with the language models, and `contextual_embedder` uses it for
    layer 0), ``"forward_{i}"`` and ``"backward_{i}"`` for i < ``num_layers``,
    and ``"softmax"``.

    To train, take ``SparseCategoricalCrossentropy(from_logits=True,
    ignore_class=0)`` against the ids shifted left (``"forward"``: target t is
    token t + 1, 0 past the end) and shifted right (``"backward"``: target t is
    token t − 1, 0 at t = 0).

    Args:
        vocabulary_size: int, number of token ids (0 = padding).
        num_layers: int, recurrent layers per direction, L. Default 2.
        units: int, units of every recurrent layer. Default 128.
        cell: a registered recurrent cell (`keras_seq.models.register_cell`).
            Default ``"coupled"`` (`keras_seq.layers.CoupledGateLSTM`).
        embedding_dim: int or None, width of the token embedding. Default
            None: ``units``.
        dropout: float in [0, 1), dropout rate. Default 0.

    Returns:
        A `keras_seq.tasks.BidirectionalLM` ``token_ids (B, T) -> {"forward":
        (B, T, V), "backward": (B, T, V)}`` of logits.

    Examples:
        >>> bilm = bidirectional_language_model(20, num_layers=2, units=8)
        >>> logits = bilm(keras.ops.convert_to_tensor([[5, 6, 7, 0]], "int32"))
        >>> tuple(logits["forward"].shape), tuple(logits["backward"].shape)
        ((1, 4, 20), (1, 4, 20))
        >>> type(bilm.get_layer("backward_1")).__name__
        'CoupledGateLSTM'
        >>> tuple(bilm.get_layer("softmax").kernel.shape)  # one softmax for both directions
        (8, 20)

    References:
        - Peters et al., 2018. Deep contextualized word representations.
          https://arxiv.org/abs/1802.05365
    """
    where = "bidirectional_language_model"
    vocabulary_size = check_positive_int(where, "vocabulary_size", vocabulary_size)
    num_layers = check_positive_int(where, "num_layers", num_layers)
    units = check_positive_int(where, "units", units)
    embedding_dim = check_positive_int(where, "embedding_dim", embedding_dim, allow_none=True)
    dropout = check_rate(where, "dropout", dropout)
    check_cell(cell, where)
    embedding_dim = units if embedding_dim is None else embedding_dim

    # The parts are built here, in the order of their calls, so that a seed
    # gives the weights it gave when this builder returned this graph itself.
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    embedding = keras.layers.Embedding(vocabulary_size, embedding_dim, mask_zero=True,
                                       name="token_embedding")
    projection = (
        keras.layers.Dense(units, name="token_projection") if embedding_dim != units else None
    )
    softmax = keras.layers.Dense(vocabulary_size, dtype="float32", name="softmax")

    def stack(x, direction):
        layers = []
        for i in range(num_layers):
            if dropout > 0:
                x = keras.layers.Dropout(dropout, name=f"{direction}_dropout_{i}")(x)
            layers.append(recurrent_layer(cell, units, return_sequences=True,
                                          name=f"{direction}_{i}"))
            x = layers[-1](x)
        if dropout > 0:
            x = keras.layers.Dropout(dropout, name=f"{direction}_output_dropout")(x)
        softmax(x)
        return layers

    x = embedding(token_ids)
    x = x if projection is None else projection(x)
    forward_layers, backward_layers = stack(x, "forward"), stack(x, "backward")
    forget_calls(token_ids)
    return BidirectionalLM(embedding, forward_layers, backward_layers, softmax,
                           token_projection=projection, dropout=dropout)


def contextual_embedder(bilm: keras.Model) -> keras.Model:
    """The biLM's layer representations, stacked: ELMo's input to a task model.

    ```
    R_0 = [x; x]                         the context-free token representation
    R_j = [h→_j; h←_j]                   j = 1 … L, backward outputs at the
                                         original positions
    ```

    x is the biLM's token embedding, or its ``token_projection`` when the
    biLM's ``embedding_dim`` differs from ``units`` (the projection is a
    linear layer trained with the biLM, so every R_j has width 2·units). The
    model reuses the biLM's layers and weights (no new weights, no dropout);
    freeze it with ``embedder.trainable = False`` and mix its layers with
    `keras_seq.layers.scalar_mix.ScalarMix`.

    Args:
        bilm: a model built by `bidirectional_language_model` (a
            `keras_seq.tasks.BidirectionalLM`, or loaded from its ``.keras`` file).

    Returns:
        A `keras.Model` ``token_ids (B, T) -> (B, L + 1, T, 2·units)``.

    Examples:
        >>> from keras_seq.layers.scalar_mix import ScalarMix
        >>> bilm = bidirectional_language_model(20, num_layers=2, units=8, embedding_dim=6)
        >>> embedder = contextual_embedder(bilm)
        >>> r = embedder(keras.ops.convert_to_tensor([[5, 6, 7, 0]], "int32"))
        >>> tuple(r.shape)
        (1, 3, 4, 16)
        >>> tuple(ScalarMix()([r[:, j] for j in range(3)]).shape)
        (1, 4, 16)
    """
    where = "contextual_embedder"
    if not isinstance(bilm, keras.Model):
        raise invalid_type(where, "bilm", "a model built by bidirectional_language_model", bilm)
    try:
        task = as_task(bilm)
    except TypeError:
        task = None
    if not isinstance(task, BidirectionalLM):
        raise invalid_value(
            where, "bilm",
            "a model built by bidirectional_language_model (a keras_seq.tasks.BidirectionalLM)",
            bilm.name,
        )
    return task.contextual_embedder()
