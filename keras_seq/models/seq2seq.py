"""Sequence-to-sequence builders: recurrent with attention, and Transformer.

Each builder makes the parts of a translator and returns the
`keras_seq.tasks.Seq2SeqLM` they make: inputs ``encoder_inputs (B, S)`` and
``decoder_inputs (B, T)`` (int token ids, 0 = padding), output ``logits (B,
T, V)``, trained with teacher forcing; decoding runs the task's own step
(`Seq2SeqLM.call_with_cache`).
"""

from __future__ import annotations

import keras

from keras_seq._validation import (
    check_bool,
    check_choice,
    check_positive_int,
    check_rate,
    check_zoneout,
)
from keras_seq.layers import Bidirectional, RecurrentDecoder
from keras_seq.layers.recurrent.recurrent_decoder import ATTENTION_KINDS
from keras_seq.layers.recurrent.registry import check_cell, num_states, recurrent_layer
from keras_seq.models.embedding import check_num_heads
from keras_seq.tasks import Seq2SeqLM, as_task
from keras_seq.tasks.task import forget_calls


def seq2seq_kind(model) -> str | None:
    """Which kind of translator a model is: ``"rnn"``, ``"transformer"`` or None.

    Args:
        model: any object; a `keras_seq.tasks.Seq2SeqLM` (or a model of the
            release's builders) gets a kind.

    Returns:
        ``"rnn"`` for a recurrent decoder (`rnn_seq2seq`), ``"transformer"``
        for Transformer blocks (`transformer_seq2seq`), None for anything else.

    Examples:
        >>> seq2seq_kind(rnn_seq2seq(20, 15, units=8, embedding_dim=4))
        'rnn'
        >>> seq2seq_kind(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])) is None
        True
    """
    try:
        task = as_task(model)
    except TypeError:
        return None
    if not isinstance(task, Seq2SeqLM):
        return None
    return "rnn" if task.recurrent else "transformer"


def rnn_seq2seq(
    source_vocabulary_size: int,
    target_vocabulary_size: int,
    units: int = 128,
    embedding_dim: int = 64,
    cell: str = "gru",
    attention: str | None = "bahdanau",
    attention_units: int | None = None,
    dropout: float = 0.0,
    name: str = "rnn_seq2seq",
    zoneout=0.0,
) -> keras.Model:
    """Bidirectional recurrent encoder and attentive recurrent decoder.

    The architecture of Bahdanau et al. (2015): the encoder reads the source
    with a bidirectional RNN, h_j = [h→_j; h←_j]; the decoder state starts at
    s_0 = tanh(W_s [h→_S; h←_1]) and at each step reads the previous target
    token together with an attention context c_i over all h_j (see
    `RecurrentDecoder`); logits come from a linear layer on [s_i; c_i]. With
    ``attention=None`` it is the plain encoder-decoder of Sutskever et al.
    (2014) / Cho et al. (2014), where s_0 alone carries the source.

    Args:
        source_vocabulary_size: int, number of source token ids.
        target_vocabulary_size: int, number of target token ids.
        units: int, width of each encoder direction and of the decoder state.
            Default 128.
        embedding_dim: int, width of the source and target embeddings. Default 64.
        cell: ``"gru"`` (default), ``"lstm"`` (Keras' LSTM), ``"peephole"``
            (`keras_seq.layers.PeepholeLSTM`), ``"coupled"``
            (`keras_seq.layers.CoupledGateLSTM`) or ``"simple"`` (Keras'
            SimpleRNN, the Elman RNN h_t = tanh(x_t W + h_{t-1} U + b)) or
            ``"layernorm_lstm"`` (`keras_seq.layers.LayerNormLSTM`). The
            LSTM family carries two states (h, c) and gets one bridge per
            state; the GRU and the Elman RNN carry h alone.
        attention: ``"bahdanau"`` (default), ``"luong"`` (Luong et al.'s
            "general" score, `keras_seq.layers.LuongAttention`, in the same
            place: the query is s_{i-1}), ``"monotonic_bahdanau"`` or
            ``"monotonic_luong"`` (Raffel et al.'s 2017 monotonic attention
            of those energies: hard, left-to-right alignments at inference;
            the encoder is then one left-to-right RNN, h_j of width
            ``units``, and the decoder starts from zeros, so that decoding
            can start before the source ends) or None.
        attention_units: int, hidden width of the additive attention. Defaults
            to ``units``. Not used by ``"luong"`` (its kernel maps the
            annotations to ``units``).
        dropout: float, dropout on the embeddings and on [s_i; c_i]. Default 0.
        name: model name.
        zoneout: float or one per state: zoneout of the encoder's and the
            decoder's recurrent layers (Krueger et al. 2017; see
            `keras_seq.layers.PeepholeLSTM`), with every ``cell``. Default 0.

    Returns:
        An uncompiled `keras_seq.tasks.Seq2SeqLM` ``{"encoder_inputs",
        "decoder_inputs"} -> logits (B, T, target_vocabulary_size)``.

    Examples:
        >>> model = rnn_seq2seq(20, 15, units=8, embedding_dim=4)
        >>> logits = model({"encoder_inputs": keras.ops.ones((2, 6), "int32"),
        ...                 "decoder_inputs": keras.ops.ones((2, 3), "int32")})
        >>> tuple(logits.shape)
        (2, 3, 15)

    References:
        Bahdanau, Cho, Bengio. Neural Machine Translation by Jointly Learning
        to Align and Translate. ICLR 2015.
        Cho et al. Learning Phrase Representations using RNN Encoder-Decoder
        for Statistical Machine Translation. EMNLP 2014.
    """
    where = "rnn_seq2seq"
    source_vocabulary_size = check_positive_int(
        where, "source_vocabulary_size", source_vocabulary_size
    )
    target_vocabulary_size = check_positive_int(
        where, "target_vocabulary_size", target_vocabulary_size
    )
    units = check_positive_int(where, "units", units)
    embedding_dim = check_positive_int(where, "embedding_dim", embedding_dim)
    check_cell(cell, where)
    check_choice(where, "attention", attention, (*ATTENTION_KINDS, None))
    zoneout = check_zoneout(where, zoneout)
    if attention_units is None:
        attention_units = units
    attention_units = check_positive_int(where, "attention_units", attention_units)
    dropout = check_rate(where, "dropout", dropout)
    extra = {"zoneout": zoneout} if zoneout else {}

    # Encoder: source ids -> annotations h (B, S, 2u) and the decoder's s_0.
    source = keras.Input((None,), dtype="int32", name="source_ids")
    x = keras.layers.Embedding(
        source_vocabulary_size, embedding_dim, mask_zero=True, name="source_embedding"
    )(source)
    x = keras.layers.Dropout(dropout, name="source_dropout")(x)
    monotonic = attention is not None and attention.startswith("monotonic")
    if monotonic:
        # Left to right, and the decoder starts from zeros: nothing waits for
        # the end of the source, so decoding can start while it streams in.
        h = recurrent_layer(cell, units, return_sequences=True, name="encoder_rnn", **extra)(x)
        encoder = keras.Model(source, h, name="encoder")
    else:
        encoder = _bidirectional_encoder(source, x, cell, units, extra)
    # The parts are built here, in the order of their calls, so that a seed
    # gives the weights it gave when this builder returned this graph itself.
    encoder_inputs = keras.Input((None,), dtype="int32", name="encoder_inputs")
    decoder_inputs = keras.Input((None,), dtype="int32", name="decoder_inputs")
    h, *s0 = encoder(encoder_inputs) if not monotonic else [encoder(encoder_inputs)]
    target_embedding = keras.layers.Embedding(
        target_vocabulary_size, embedding_dim, mask_zero=True, name="target_embedding"
    )
    y = keras.layers.Dropout(dropout, name="target_dropout")(target_embedding(decoder_inputs))
    decoder = RecurrentDecoder(
        units,
        cell=cell,
        attention_units=attention_units if attention else None,
        attention=attention or "bahdanau",
        name="decoder",
        **extra,
    )
    o = decoder(y, h, initial_state=s0 or None) if attention else decoder(y, initial_state=s0)
    o = keras.layers.Dropout(dropout, name="output_dropout")(o)
    logits = keras.layers.Dense(target_vocabulary_size, dtype="float32", name="logits")
    logits(o)
    forget_calls(encoder_inputs, decoder_inputs)
    return Seq2SeqLM(encoder, target_embedding, decoder, output_layer=logits, dropout=dropout,
                     name=name)


def _bidirectional_encoder(source, x, cell, units, extra):
    """Bahdanau et al.'s encoder: h_j = [h→_j; h←_j] and s_0 = tanh(W_s [h→_S; h←_1])."""
    encoded = Bidirectional(
        recurrent_layer(cell, units, return_sequences=True, return_state=True, **extra),
        name="bidirectional_encoder",
    )(x)
    h, states = encoded[0], encoded[1:]
    n = num_states(cell)
    forward, backward = states[:n], states[n:]
    initial_state = []
    for k in range(n):
        # s_0 = tanh(W_s [h→; h←]); an LSTM's memory cell starts linear.
        both = keras.layers.Concatenate(name=f"final_states_{k}")([forward[k], backward[k]])
        initial_state.append(
            keras.layers.Dense(units, activation="tanh" if k == 0 else None, name=f"bridge_{k}")(
                both
            )
        )
    return keras.Model(source, [h, *initial_state], name="encoder")


def transformer_seq2seq(
    source_vocabulary_size: int,
    target_vocabulary_size: int,
    num_layers: int = 2,
    model_dim: int = 128,
    num_heads: int = 4,
    intermediate_dim: int = 512,
    dropout: float = 0.1,
    tie_embeddings: bool = True,
    normalize_first: bool = False,
    name: str = "transformer_seq2seq",
) -> keras.Model:
    """Transformer encoder-decoder (Vaswani et al., 2017).

    x = √d · E[ids] + P (sinusoidal positions), then ``num_layers``
    `TransformerEncoder` blocks over the source and ``num_layers``
    `TransformerDecoder` blocks (causal self-attention, cross-attention to
    the encoder output) over the shifted target; logits = h Eᵀ with tied
    embeddings, else a separate linear layer.

    Args:
        source_vocabulary_size: int, number of source token ids.
        target_vocabulary_size: int, number of target token ids.
        num_layers: int, encoder blocks and decoder blocks (each). Default 2.
        model_dim: int, width d of every block. Default 128.
        num_heads: int, attention heads; must divide ``model_dim``. Default 4.
        intermediate_dim: int, width of the position-wise feed-forward layer.
            Default 512.
        dropout: float, dropout on embeddings and inside blocks. Default 0.1.
        tie_embeddings: bool, share the target embedding with the output
            projection. Default True.
        normalize_first: bool, pre-norm blocks (plus a final LayerNorm) instead
            of the paper's post-norm. Default False.
        name: model name.

    Returns:
        An uncompiled `keras_seq.tasks.Seq2SeqLM` ``{"encoder_inputs",
        "decoder_inputs"} -> logits (B, T, target_vocabulary_size)``.

    Examples:
        >>> model = transformer_seq2seq(20, 15, num_layers=1, model_dim=8,
        ...                             num_heads=2, intermediate_dim=16)
        >>> logits = model({"encoder_inputs": keras.ops.ones((2, 6), "int32"),
        ...                 "decoder_inputs": keras.ops.ones((2, 3), "int32")})
        >>> tuple(logits.shape)
        (2, 3, 15)

    References:
        Vaswani et al. Attention Is All You Need. NeurIPS 2017.
    """
    from keras_seq.layers import PaddingMask, TransformerDecoder, TransformerEncoder
    from keras_seq.models.embedding import embed_positions

    where = "transformer_seq2seq"
    source_vocabulary_size = check_positive_int(
        where, "source_vocabulary_size", source_vocabulary_size
    )
    target_vocabulary_size = check_positive_int(
        where, "target_vocabulary_size", target_vocabulary_size
    )
    num_layers = check_positive_int(where, "num_layers", num_layers)
    model_dim = check_positive_int(where, "model_dim", model_dim)
    num_heads = check_num_heads(where, "model_dim", model_dim, num_heads)
    intermediate_dim = check_positive_int(where, "intermediate_dim", intermediate_dim)
    dropout = check_rate(where, "dropout", dropout)
    tie_embeddings = check_bool(where, "tie_embeddings", tie_embeddings)
    normalize_first = check_bool(where, "normalize_first", normalize_first)

    source = keras.Input((None,), dtype="int32", name="source_ids")
    source_mask = PaddingMask(name="source_padding_mask")(source)
    x, _, _ = embed_positions(source, source_vocabulary_size, model_dim, dropout, "source")
    for i in range(num_layers):
        x = TransformerEncoder(
            intermediate_dim,
            num_heads,
            dropout=dropout,
            normalize_first=normalize_first,
            name=f"encoder_layer_{i}",
        )(x, padding_mask=source_mask)
    if normalize_first:
        x = keras.layers.LayerNormalization(epsilon=1e-5, name="encoder_final_norm")(x)
    encoder = keras.Model(source, x, name="encoder")

    # The parts are built here, in the order of their calls, so that a seed
    # gives the weights it gave when this builder returned this graph itself.
    encoder_inputs = keras.Input((None,), dtype="int32", name="encoder_inputs")
    decoder_inputs = keras.Input((None,), dtype="int32", name="decoder_inputs")
    encoder_mask = PaddingMask(name="encoder_padding_mask")(encoder_inputs)
    decoder_mask = PaddingMask(name="decoder_padding_mask")(decoder_inputs)
    h = encoder(encoder_inputs)
    y, target_embedding, target_position = embed_positions(
        decoder_inputs, target_vocabulary_size, model_dim, dropout, "target"
    )
    blocks = []
    for i in range(num_layers):
        blocks.append(TransformerDecoder(intermediate_dim, num_heads, dropout=dropout,
                                         normalize_first=normalize_first,
                                         name=f"decoder_layer_{i}"))
        y = blocks[-1](y, h, decoder_padding_mask=decoder_mask, encoder_padding_mask=encoder_mask)
    final_norm = None
    if normalize_first:
        final_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="decoder_final_norm")
        y = final_norm(y)
    output_layer = None
    if not tie_embeddings:
        output_layer = keras.layers.Dense(target_vocabulary_size, dtype="float32", name="logits")
        output_layer(y)
    forget_calls(encoder_inputs, decoder_inputs)
    return Seq2SeqLM(encoder, target_embedding, blocks, output_layer=output_layer,
                     target_position=target_position, final_norm=final_norm,
                     dropout=dropout, name=name)
