"""Functional-API model builders: seq2seq, language models, classifiers (recurrent,
Transformer, the DCNN, and a language model fine-tuned as a classifier) and a
sequence tagger (defined with its task, `keras_seq.tasks.sequence_tagger`).

The layers that the builders create are classes of `keras_seq.layers`;
`RecurrentDecoder`, `TokenEmbedding`, `PaddingMask` and `WideConvolution1D`
are also importable from here, where they were first published.
"""

from keras_seq.layers import PaddingMask, RecurrentDecoder, TokenEmbedding, WideConvolution1D
from keras_seq.layers.recurrent.registry import register_cell

# A language-model run's model.keras is compiled with Perplexity: importing
# the builders registers it, as it registers the layers, for load_model.
from keras_seq.metrics import Perplexity  # noqa: F401
from keras_seq.models.dcnn import dcnn_classifier
from keras_seq.models.elmo import bidirectional_language_model, contextual_embedder
from keras_seq.models.language_model import (
    language_model,
    language_model_hidden_states,
    language_model_kind,
    sequence_classifier,
)
from keras_seq.models.lm_classifier import classifier_from_language_model
from keras_seq.models.seq2seq import rnn_seq2seq, seq2seq_kind, transformer_seq2seq
from keras_seq.tasks.sequence_tagger import sequence_tagger

__all__ = [
    "PaddingMask",
    "RecurrentDecoder",
    "TokenEmbedding",
    "WideConvolution1D",
    "bidirectional_language_model",
    "classifier_from_language_model",
    "contextual_embedder",
    "dcnn_classifier",
    "language_model",
    "language_model_hidden_states",
    "language_model_kind",
    "register_cell",
    "rnn_seq2seq",
    "seq2seq_kind",
    "sequence_classifier",
    "sequence_tagger",
    "transformer_seq2seq",
]
