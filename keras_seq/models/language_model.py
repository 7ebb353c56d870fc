"""Language-model and sequence-classifier builders."""

from __future__ import annotations

import keras

from keras_seq._validation import (
    check_bool,
    check_choice,
    check_positive_int,
    check_rate,
    invalid_type,
)
from keras_seq.layers import RNN, Bidirectional, PaddingMask, RecurrentBlock
from keras_seq.layers.recurrent.registry import check_cell, recurrent_layer, takes_num_heads
from keras_seq.model_kinds import BLOCK_MODELS, LANGUAGE_MODEL_KINDS
from keras_seq.models.embedding import check_num_heads, embed_positions
from keras_seq.tasks import CausalLM, TextClassifier, as_task
from keras_seq.tasks.task import forget_calls

_CLASSIFIER_KINDS = ("transformer", "rnn")


def language_model_kind(model) -> str | None:
    """Which kind of language model a model is: ``"transformer"``, ``"rnn"`` or None.

    ``"rnn"`` for every recurrent kind (stacked layers, or the residual
    blocks of `keras_seq.model_kinds.BLOCK_MODELS`): a `keras_seq.tasks.CausalLM`
    (or a model of the release's `language_model`) whose blocks are recurrent.

    Examples:
        >>> language_model_kind(language_model(30, kind="rnn", num_layers=1, units=8))
        'rnn'
        >>> language_model_kind(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])) is None
        True
    """
    try:
        task = as_task(model)
    except TypeError:
        return None
    if not isinstance(task, CausalLM):
        return None
    return "rnn" if task.recurrent else "transformer"


def language_model_hidden_states(model) -> keras.KerasTensor:
    """The hidden states ``(B, T, d)`` of a `language_model`'s last block (after
    its final norm, where there is one): the tensor its output layer reads, on
    its own graph, to build other heads on the same body (see
    `keras_seq.tasks.CausalLM.backbone`).

    Raises:
        TypeError: ``model`` was not built by `language_model`.

    Examples:
        >>> model = language_model(30, kind="rnn", num_layers=2, units=8)
        >>> tuple(keras.Model(model.inputs[0], language_model_hidden_states(model))(
        ...     keras.ops.ones((2, 5), "int32")).shape)
        (2, 5, 8)
    """
    task = as_task(model, "language_model_hidden_states")
    if not isinstance(task, CausalLM):
        raise invalid_type("language_model_hidden_states", "model",
                           "a keras.Model built by keras_seq.models.language_model", model)
    return task.backbone.output


def language_model(
    vocabulary_size: int,
    kind: str = "transformer",
    num_layers: int = 2,
    units: int = 128,
    num_heads: int = 4,
    intermediate_dim: int = 512,
    cell: str = "gru",
    dropout: float = 0.1,
    tie_embeddings: bool = True,
    name: str = "language_model",
) -> keras.Model:
    """Next-token language model: decoder-only Transformer, stacked RNN, or residual recurrent blocks.

    ``kind="transformer"`` (GPT-style): x = √d·E[ids] + P, then
    ``num_layers`` `TransformerDecoder` blocks without cross-attention (causal
    self-attention only), logits = h Eᵀ when ``tie_embeddings``.
    ``kind="rnn"``: an embedding, ``num_layers`` stacked recurrent layers
    (``cell`` as in `rnn_seq2seq`) and a linear output layer.
    ``kind="mingru"``, ``"minlstm"``, ``"rglru"``: an embedding,
    ``num_layers`` pre-norm residual `RecurrentBlock`s of width ``units``
    around that cell (Griffin's block: RMSNorm, then Dense → causal
    Conv1D(4) → the cell, times GELU(Dense), Dense back; then an MLP of
    width ``intermediate_dim``), a final RMSNorm and a linear output layer;
    ``kind="xlstm"``: the same with mLSTM blocks (even layers) and sLSTM
    blocks (odd layers) alternating, ``num_heads`` heads each. These train
    in their parallel form (the sLSTM step by step) and generate one token
    at a time with the same weights. Position t of the logits predicts
    token t + 1.

    Args:
        vocabulary_size: int, number of token ids (0 = padding).
        kind: ``"transformer"`` (default), ``"rnn"``, ``"mingru"``,
            ``"minlstm"``, ``"rglru"`` or ``"xlstm"``.
        num_layers: int, blocks or recurrent layers. Default 2.
        units: int, model width d (Transformer, blocks) or recurrent units. Default 128.
        num_heads: int, attention heads (Transformer) or xLSTM heads; must divide ``units``.
        intermediate_dim: int, feed-forward width (Transformer, blocks). Default 512.
        cell: recurrent cell of ``kind="rnn"``. Default ``"gru"``.
        dropout: float, dropout rate. Default 0.1.
        tie_embeddings: bool, share the embedding with the output layer
            (Transformer). Default True.
        name: model name.

    Returns:
        A `keras_seq.tasks.CausalLM` ``token_ids (B, T) -> logits (B, T, vocabulary_size)``.

    Examples:
        >>> model = language_model(30, num_layers=1, units=8, num_heads=2, intermediate_dim=16)
        >>> tuple(model(keras.ops.ones((2, 5), "int32")).shape)
        (2, 5, 30)
        >>> model = language_model(30, kind="xlstm", units=8, num_heads=2, intermediate_dim=16)
        >>> tuple(model(keras.ops.ones((2, 5), "int32")).shape)
        (2, 5, 30)

    References:
        Radford et al. Improving Language Understanding by Generative
        Pre-Training. 2018.
        Mikolov et al. Recurrent neural network based language model. 2010.
        De et al. Griffin: Mixing Gated Linear Recurrences with Local
        Attention for Efficient Language Models. 2024.
        Beck et al. xLSTM: Extended Long Short-Term Memory. 2024.
    """
    where = "language_model"
    vocabulary_size = check_positive_int(where, "vocabulary_size", vocabulary_size)
    num_layers = check_positive_int(where, "num_layers", num_layers)
    units = check_positive_int(where, "units", units)
    dropout = check_rate(where, "dropout", dropout)
    check_choice(where, "kind", kind, LANGUAGE_MODEL_KINDS)
    # The parts are built here, in the order of their calls, so that a seed
    # gives the weights it gave when this builder returned this graph itself.
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    if kind == "rnn":
        check_cell(cell, where)
        embedding = keras.layers.Embedding(vocabulary_size, units, mask_zero=True,
                                           name="embedding")
        x, blocks = embedding(token_ids), []
        for i in range(num_layers):
            x = keras.layers.Dropout(dropout, name=f"dropout_{i}")(x)
            blocks.append(recurrent_layer(cell, units, return_sequences=True,
                                          name=f"recurrent_{i}"))
            x = blocks[-1](x)
        x = keras.layers.Dropout(dropout, name="output_dropout")(x)
        output_layer = keras.layers.Dense(vocabulary_size, dtype="float32", name="logits")
        output_layer(x)
        forget_calls(token_ids)
        return CausalLM(embedding, blocks, output_layer=output_layer, dropout=dropout, name=name)
    if kind in BLOCK_MODELS:
        return _block_language_model(token_ids, vocabulary_size, kind, num_layers, units,
                                     num_heads, intermediate_dim, dropout, name)

    from keras_seq.layers import TransformerDecoder

    num_heads = check_num_heads(where, "units", units, num_heads)
    intermediate_dim = check_positive_int(where, "intermediate_dim", intermediate_dim)
    tie_embeddings = check_bool(where, "tie_embeddings", tie_embeddings)
    mask = PaddingMask(name="padding_mask")(token_ids)
    x, embedding, position = embed_positions(token_ids, vocabulary_size, units, dropout, "token")
    blocks = []
    for i in range(num_layers):
        blocks.append(TransformerDecoder(intermediate_dim, num_heads, dropout=dropout,
                                         name=f"decoder_layer_{i}"))
        x = blocks[-1](x, decoder_padding_mask=mask)
    output_layer = None
    if not tie_embeddings:
        output_layer = keras.layers.Dense(vocabulary_size, dtype="float32", name="logits")
        output_layer(x)
    forget_calls(token_ids)
    return CausalLM(embedding, blocks, output_layer=output_layer, token_position=position,
                    dropout=dropout, name=name)


def sequence_classifier(
    vocabulary_size: int,
    num_classes: int,
    kind: str = "rnn",
    units: int = 64,
    cell: str = "gru",
    num_layers: int = 1,
    num_heads: int = 4,
    intermediate_dim: int = 256,
    dropout: float = 0.1,
    name: str = "sequence_classifier",
) -> keras.Model:
    """Sequence classifier: an encoder, masked mean pooling, a linear layer.

    ``kind="rnn"``: embedding → ``num_layers`` bidirectional recurrent layers
    (``cell`` as in `rnn_seq2seq`). ``kind="transformer"``: √d·E[ids] + P →
    ``num_layers`` `TransformerEncoder` blocks. Then the mean of the encoder
    outputs over non-padding positions (zeros for a row of padding only),
    dropout, and logits over the classes.

    Args:
        vocabulary_size: int, number of token ids (0 = padding).
        num_classes: int, number of classes.
        kind: ``"rnn"`` (default) or ``"transformer"``.
        units: int, recurrent units per direction, or model width d. Default 64.
        cell: recurrent cell of ``kind="rnn"``. Default ``"gru"``.
        num_layers: int, encoder layers. Default 1.
        num_heads: int, attention heads (Transformer); must divide ``units``.
        intermediate_dim: int, feed-forward width (Transformer). Default 256.
        dropout: float, dropout rate. Default 0.1.
        name: model name.

    Returns:
        A `keras_seq.tasks.TextClassifier` ``token_ids (B, T) -> logits (B, num_classes)``
        (its backbone, ``"encoder"``, gives the encoder's outputs ``(B, T, d)``).

    Examples:
        >>> model = sequence_classifier(30, 3, units=8)
        >>> tuple(model(keras.ops.ones((2, 5), "int32")).shape)
        (2, 3)
    """
    where = "sequence_classifier"
    vocabulary_size = check_positive_int(where, "vocabulary_size", vocabulary_size)
    num_classes = check_positive_int(where, "num_classes", num_classes)
    units = check_positive_int(where, "units", units)
    num_layers = check_positive_int(where, "num_layers", num_layers)
    dropout = check_rate(where, "dropout", dropout)
    check_choice(where, "kind", kind, _CLASSIFIER_KINDS)
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    if kind == "rnn":
        check_cell(cell, where)
        x = keras.layers.Embedding(vocabulary_size, units, mask_zero=True, name="embedding")(
            token_ids
        )
        for i in range(num_layers):
            x = Bidirectional(
                recurrent_layer(cell, units, return_sequences=True), name=f"bidirectional_{i}"
            )(x)
    else:
        from keras_seq.layers import TransformerEncoder

        num_heads = check_num_heads(where, "units", units, num_heads)
        intermediate_dim = check_positive_int(where, "intermediate_dim", intermediate_dim)
        mask = PaddingMask(name="padding_mask")(token_ids)
        x, _, _ = embed_positions(token_ids, vocabulary_size, units, dropout, "token")
        for i in range(num_layers):
            x = TransformerEncoder(
                intermediate_dim, num_heads, dropout=dropout, name=f"encoder_layer_{i}"
            )(x, padding_mask=mask)
    return TextClassifier(keras.Model(token_ids, x, name="encoder"), num_classes,
                          pooling="mean", dropout=dropout, name=name)


def _block_language_model(token_ids, vocabulary_size, kind, num_layers, units, num_heads,
                          intermediate_dim, dropout, name):
    """`language_model` of residual `RecurrentBlock`s (``kind`` in
    `keras_seq.model_kinds.BLOCK_MODELS`, which names the block cells of its layers in turn).

    No padding mask: the model is causal, so right padding never reaches an
    earlier position, and a mask would only cost the blocks their masked
    form in training.
    """
    where = "language_model"
    cells = BLOCK_MODELS[kind]
    # Heads only where a cell takes them: the other kinds accept any num_heads.
    headed = any(takes_num_heads(cell) for cell in cells)
    num_heads = check_num_heads(where, "units", units, num_heads) if headed else 1
    intermediate_dim = check_positive_int(where, "intermediate_dim", intermediate_dim)
    embedding = keras.layers.Embedding(vocabulary_size, units, name="embedding")
    x, blocks = embedding(token_ids), []
    for i in range(num_layers):
        block = RecurrentBlock(units, cell=cells[i % len(cells)], num_heads=num_heads,
                               intermediate_dim=intermediate_dim)
        x = keras.layers.Dropout(dropout, name=f"dropout_{i}")(x)
        blocks.append(RNN(block, return_sequences=True, name=f"recurrent_{i}"))
        x = blocks[-1](x)
    final_norm = keras.layers.RMSNormalization(epsilon=1e-6, name="final_norm")
    x = keras.layers.Dropout(dropout, name="output_dropout")(final_norm(x))
    output_layer = keras.layers.Dense(vocabulary_size, dtype="float32", name="logits")
    output_layer(x)
    forget_calls(token_ids)
    return CausalLM(embedding, blocks, output_layer=output_layer, final_norm=final_norm,
                    dropout=dropout, name=name)
