"""Functional-API model builders: seq2seq, language models and classifiers (recurrent,
Transformer and the DCNN)."""

from keras_seq.models._cells import register_cell
from keras_seq.models.dcnn import WideConvolution1D, dcnn_classifier
from keras_seq.models.embedding import PaddingMask, TokenEmbedding
from keras_seq.models.language_model import (
    language_model,
    language_model_kind,
    sequence_classifier,
)
from keras_seq.models.recurrent_decoder import RecurrentDecoder
from keras_seq.models.seq2seq import rnn_seq2seq, seq2seq_kind, transformer_seq2seq

__all__ = [
    "PaddingMask",
    "RecurrentDecoder",
    "TokenEmbedding",
    "WideConvolution1D",
    "dcnn_classifier",
    "language_model",
    "language_model_kind",
    "register_cell",
    "rnn_seq2seq",
    "seq2seq_kind",
    "sequence_classifier",
    "transformer_seq2seq",
]
