"""ELMo's bidirectional language model and its contextual embedder (Peters et al. 2018)."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq._validation import check_positive_int, check_rate, invalid_type, invalid_value
from keras_seq.layers.recurrent.registry import check_cell, recurrent_layer


def _row_reversal(token_ids):
    """The gather indices that reverse the real tokens of each row in place.

    ``idx[b, t] = n_b − 1 − t`` for t < n_b (n_b: the row's real tokens,
    padding at the end only) and ``t`` for the padding, so
    ``take_along_axis(x, idx, axis=1)`` reads the row from its last real token
    and leaves the padding where it was. The map is its own inverse: the same
    indices put reversed outputs back in place. Built from keras.ops only (no
    static length needed), so it runs and reloads on every backend.
    """
    t = ops.cumsum(ops.ones_like(token_ids), axis=1) - 1  # (B, T): 0, 1, ..., T − 1
    n = ops.sum(ops.cast(ops.not_equal(token_ids, 0), "int32"), axis=1, keepdims=True)  # (B, 1)
    return ops.where(t < ops.cast(n, t.dtype), ops.cast(n, t.dtype) - 1 - t, t)


def _reverse_rows(x, idx):
    """``x (B, T)`` or ``(B, T, F)`` with each row's real steps reversed (see `_row_reversal`)."""
    if len(x.shape) == 3:
        idx = ops.expand_dims(idx, -1)  # (B, T, 1), broadcast over the features
    return ops.take_along_axis(x, idx, axis=1)


def _token_representation(token_ids, embedding, projection):
    """x = E[ids], then the projection when there is one: (B, T, units), with the padding mask."""
    x = embedding(token_ids)
    return x if projection is None else projection(x)


def bidirectional_language_model(
    vocabulary_size: int,
    num_layers: int = 2,
    units: int = 128,
    cell: str = "coupled",
    embedding_dim: int | None = None,
    dropout: float = 0.0,
) -> keras.Model:
    """ELMo's biLM: a forward and a backward recurrent language model with one softmax.

    ```
    x        = E[ids]                  (B, T, embedding_dim), 0 = padding
    x        = x W_p + b_p             (B, T, units), only when embedding_dim != units
    h→_j     = forward_j(h→_{j−1})     h→_0 = x, read left to right
    h←_j     = backward_j(h←_{j−1})    h←_0 = x, read from each row's last real token
    forward  = h→_L W_s + b_s          (B, T, V): predicts token t + 1 from tokens <= t
    backward = h←_L W_s + b_s          (B, T, V): predicts token t − 1 from tokens >= t
    ```

    Token ids are padded at the end of a row only. The backward stack reads
    each row reversed from its last real token (the padding is never read):
    the ids are reversed row by row, the backward layers run left to right
    over them with the padding mask, and their outputs are put back at the
    original positions. The two directions share the token embedding (and
    projection) and the softmax layer ``W_s`` (one ``Dense``), as in ELMo.
    With ``dropout > 0``, dropout is applied to the input of every recurrent
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
        A `keras.Model` ``token_ids (B, T) -> {"forward": (B, T, V),
        "backward": (B, T, V)}`` of logits.

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

    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    embedding = keras.layers.Embedding(vocabulary_size, embedding_dim, mask_zero=True,
                                       name="token_embedding")
    projection = (
        keras.layers.Dense(units, name="token_projection") if embedding_dim != units else None
    )
    softmax = keras.layers.Dense(vocabulary_size, dtype="float32", name="softmax")

    def dropout_layer(x, name):
        return keras.layers.Dropout(dropout, name=name)(x) if dropout > 0 else x

    def stack(x, direction):
        for i in range(num_layers):
            x = dropout_layer(x, f"{direction}_dropout_{i}")
            x = recurrent_layer(cell, units, return_sequences=True, name=f"{direction}_{i}")(x)
        return dropout_layer(x, f"{direction}_output_dropout")

    h_forward = stack(_token_representation(token_ids, embedding, projection), "forward")
    idx = _row_reversal(token_ids)
    h_backward = stack(
        _token_representation(_reverse_rows(token_ids, idx), embedding, projection), "backward"
    )  # (B, T, units), rows reversed
    h_backward = _reverse_rows(h_backward, idx)  # back to the original positions
    logits = {"forward": softmax(h_forward), "backward": softmax(h_backward)}
    return keras.Model(token_ids, logits, name="bidirectional_language_model")


def _num_layers(bilm) -> int:
    """L of a `bidirectional_language_model`, or 0 when ``bilm`` is not one."""
    if not isinstance(bilm, keras.Model) or not getattr(bilm, "inputs", None):
        return 0
    names = {layer.name for layer in bilm.layers}
    if not {"token_embedding", "softmax"} <= names:
        return 0
    num_layers = 0
    while {f"forward_{num_layers}", f"backward_{num_layers}"} <= names:
        num_layers += 1
    return num_layers


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
        bilm: a model built by `bidirectional_language_model` (or loaded from
            its ``.keras`` file): its layers are found by name.

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
    num_layers = _num_layers(bilm)
    if num_layers == 0:
        raise invalid_value(
            where, "bilm",
            "a model built by bidirectional_language_model (layers 'token_embedding', "
            "'forward_0', 'backward_0', 'softmax')",
            bilm.name,
        )
    embedding = bilm.get_layer("token_embedding")
    names = {layer.name for layer in bilm.layers}
    projection = bilm.get_layer("token_projection") if "token_projection" in names else None
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    idx = _row_reversal(token_ids)
    x = _token_representation(token_ids, embedding, projection)  # (B, T, units)
    x_reversed = _token_representation(_reverse_rows(token_ids, idx), embedding, projection)
    representations = [ops.concatenate([x, x], axis=-1)]  # R_0, (B, T, 2·units)
    h_forward, h_backward = x, x_reversed
    for j in range(num_layers):
        h_forward = bilm.get_layer(f"forward_{j}")(h_forward)
        h_backward = bilm.get_layer(f"backward_{j}")(h_backward)  # reversed rows
        representations.append(
            ops.concatenate([h_forward, _reverse_rows(h_backward, idx)], axis=-1)
        )
    r = ops.stack(representations, axis=1)  # (B, L + 1, T, 2·units)
    return keras.Model(token_ids, r, name="contextual_embedder")
