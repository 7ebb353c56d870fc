"""Every public layer and model builder as a tiny functional model, for the
backend tests (`test_every_backend.py`).

Each case builds a model from the current Keras backend's point of view and
returns it with its inputs and a target of the output's shape. The module is
also imported by the TensorFlow subprocess of the interchange test, which
rebuilds each case there and loads the weights or the ``.keras`` file saved
on another backend: the cases may use nothing but Keras and keras_seq.
"""

from __future__ import annotations

import keras
import numpy as np

from keras_seq import layers, models

B, T, F = 3, 6, 4


def _floats(seed=0, shape=(B, T, F)):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _ids(vocabulary, seed=0, shape=(B, T)):
    ids = np.random.default_rng(seed).integers(1, vocabulary, size=shape).astype("int32")
    ids[0, -2:] = 0  # padding at the end of one row
    return ids


def _sequence_model(make_layer, head=False):
    """x (B, T, F) -> layer(x), with a mask on the last two steps of row 0;
    ``head``: a Dense after a layer without weights (so that fit trains
    something)."""

    def build():
        inputs = keras.Input((T, F))
        masked = keras.layers.Masking(0.0)(inputs)
        outputs = make_layer()(masked)
        return keras.Model(inputs, keras.layers.Dense(2)(outputs) if head else outputs)

    x = _floats()
    x[0, -2:] = 0.0
    return build, x


def _plain_model(make_layer, shape=(T, F), head=False):
    def build():
        inputs = keras.Input(shape)
        outputs = make_layer()(inputs)
        return keras.Model(inputs, keras.layers.Dense(2)(outputs) if head else outputs)

    return build, _floats(shape=(B, *shape))


def _attention(layer_factory):
    def build():
        query = keras.Input((T, F))
        value = keras.Input((T + 1, F))
        return keras.Model([query, value], layer_factory()(query, value))

    return build, [_floats(1), _floats(2, (B, T + 1, F))]


def _stacked_cells():
    return keras.layers.RNN(
        keras.layers.StackedRNNCells([layers.CoupledGateLSTMCell(5), layers.GRUCell(4)]),
        return_sequences=True,
    )


def _transformer_decoder():
    def build():
        decoder = keras.Input((T, 8))
        encoder = keras.Input((T + 1, 6))
        block = layers.TransformerDecoder(intermediate_dim=12, num_heads=2)
        return keras.Model([decoder, encoder], block(decoder, encoder))

    return build, [_floats(1, (B, T, 8)), _floats(2, (B, T + 1, 6))]


def _token_embedding():
    def build():
        ids = keras.Input((T,), dtype="int32")
        x = models.TokenEmbedding(11, 6)(ids)
        mask = models.PaddingMask()(ids)
        y = layers.GRU(5, return_sequences=True)(x)  # the embedding's mask reaches the GRU
        return keras.Model(ids, [y, keras.ops.cast(mask, "float32")])

    return build, _ids(11)


def _recurrent_decoder(cell):
    def build():
        targets = keras.Input((T, F))
        encoder = keras.Input((T + 1, 5))
        decoder = models.RecurrentDecoder(6, cell=cell, attention_units=4)
        return keras.Model([targets, encoder], decoder(targets, encoder))

    return build, [_floats(1), _floats(2, (B, T + 1, 5))]


def _rnn_seq2seq(cell, attention):
    def build():
        return models.rnn_seq2seq(13, 11, units=6, embedding_dim=5, cell=cell,
                                  attention=attention)

    return build, {"encoder_inputs": _ids(13, 1), "decoder_inputs": _ids(11, 2)}


def _builder(make_model, vocabulary):
    return make_model, _ids(vocabulary)


def _builder_cases():
    return {
        "rnn_seq2seq_gru_bahdanau": _rnn_seq2seq("gru", "bahdanau"),
        "rnn_seq2seq_peephole": _rnn_seq2seq("peephole", None),
        "rnn_seq2seq_lstm_bahdanau": _rnn_seq2seq("lstm", "bahdanau"),
        "transformer_seq2seq": (
            lambda: models.transformer_seq2seq(13, 11, num_layers=1, model_dim=8, num_heads=2,
                                               intermediate_dim=12),
            {"encoder_inputs": _ids(13, 1), "decoder_inputs": _ids(11, 2)},
        ),
        "language_model_rnn_coupled": _builder(
            lambda: models.language_model(12, kind="rnn", num_layers=2, units=6,
                                          cell="coupled"), 12),
        "language_model_transformer": _builder(
            lambda: models.language_model(12, kind="transformer", num_layers=1, units=8,
                                          num_heads=2, intermediate_dim=12), 12),
        # GPT's fine-tuning model: the last real token's state picked with keras.ops.
        "classifier_from_language_model": _builder(
            lambda: models.classifier_from_language_model(
                models.language_model(12, kind="transformer", num_layers=1, units=8,
                                      num_heads=2, intermediate_dim=12), 3), 12),
        "sequence_classifier_rnn": _builder(
            lambda: models.sequence_classifier(12, 3, kind="rnn", units=6, cell="peephole"), 12),
        # ELMo: both stacks of the biLM (the backward one reverses each row's
        # real tokens) and the embedder's layer stacking, on this backend.
        "contextual_embedder_bilm": _builder(
            lambda: models.contextual_embedder(
                models.bidirectional_language_model(12, num_layers=2, units=6)), 12),
        "dcnn_classifier": _builder(
            lambda: models.dcnn_classifier(12, 3, embedding_dim=6, filters=(3, 4),
                                           kernel_sizes=(3, 2), k_top=2, dropout=0.0), 12),
    }


def cases() -> dict:
    """name -> (build, inputs): ``build()`` returns a new uncompiled model."""
    return {
        "PeepholeLSTM": _sequence_model(lambda: layers.PeepholeLSTM(5, return_sequences=True)),
        "CoupledGateLSTM": _sequence_model(
            lambda: layers.CoupledGateLSTM(5, use_peepholes=True, return_sequences=True)),
        "GRU": _sequence_model(lambda: layers.GRU(5, return_sequences=True)),
        "LayerNormLSTM": _sequence_model(lambda: layers.LayerNormLSTM(5, return_sequences=True)),
        "GRU_reset_before": _sequence_model(
            lambda: layers.GRU(5, reset_after=False, go_backwards=True)),
        "NTM": _sequence_model(
            lambda: layers.NTM(6, memory_size=8, memory_width=3, output_size=4,
                               return_sequences=True)),
        "RNN_PeepholeLSTMCell": _sequence_model(
            lambda: keras.layers.RNN(layers.PeepholeLSTMCell(5), return_sequences=True)),
        # No mask: Keras' own JAX and PyTorch loops take a masked step's output
        # from the first state, which is not the NTM cell's output (the NTM
        # layer's own loop carries it; docs/guides/backends.md).
        "RNN_NTMCell": _plain_model(
            lambda: keras.layers.RNN(layers.NTMCell(5, memory_size=6, memory_width=2))),
        "StackedRNNCells": _sequence_model(_stacked_cells),
        "Bidirectional_PeepholeLSTM": _sequence_model(
            lambda: keras.layers.Bidirectional(layers.PeepholeLSTM(4, return_sequences=True))),
        "BahdanauAttention": _attention(lambda: layers.BahdanauAttention(5)),
        "MultiHeadAttention": _attention(lambda: layers.MultiHeadAttention(2, 3)),
        "SinusoidalPositionalEncoding": _plain_model(layers.SinusoidalPositionalEncoding, head=True),
        "PositionwiseFeedForward": _plain_model(lambda: layers.PositionwiseFeedForward(7)),
        "TransformerEncoder": _plain_model(
            lambda: layers.TransformerEncoder(intermediate_dim=7, num_heads=2)),
        "TransformerDecoder": _transformer_decoder(),
        "Highway": _plain_model(layers.Highway),
        "KMaxPooling": _sequence_model(lambda: layers.KMaxPooling(3), head=True),
        "DynamicKMaxPooling": _sequence_model(lambda: layers.DynamicKMaxPooling(2, 1, 2), head=True),
        "Folding": _plain_model(layers.Folding, head=True),
        "WideConvolution1D": _plain_model(lambda: models.WideConvolution1D(3, 2)),
        "TokenEmbedding_PaddingMask": _token_embedding(),
        "RecurrentDecoder_gru": _recurrent_decoder("gru"),
        "RecurrentDecoder_coupled": _recurrent_decoder("coupled"),
        **_builder_cases(),
    }
