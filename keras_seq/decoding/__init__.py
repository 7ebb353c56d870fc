"""Greedy and beam-search decoding for the seq2seq models of `keras_seq.models`,
and sampling from its language models.

Everything here is TensorFlow graph code that can be wrapped in `tf.function`
and saved in a SavedModel: the output is a fixed ``(B, max_length)`` buffer
updated inside one `tf.while_loop` (no `TensorArray`, no Python loop over
time), and the loop stops early once every sequence has produced ``[END]``.

Modules: `steps` (the one-step view of a model), `search` (greedy and beam
search), `sampling` (language models).

The decoder runs one step at a time from the model's named parts (see
`keras_seq.models.seq2seq`): the recurrent decoder carries its state and reuses
the attention keys W_k h computed once per batch; the Transformer decoder
carries a self-attention key/value cache per block and reads cross-attention
keys/values computed once from the encoder output. `decoder_steps` returns
that one-step view (`DecoderSteps`); `keras_seq.export` converts it into an
encoder and a decoder-step model for decoding loops outside TensorFlow.
`greedy_decode_steps` and `beam_search_steps` run the same searches on any
`DecoderSteps` (a captioner with an image encoder, say).
`language_model_steps` is the same view of a `models.language_model` (the
Transformer's blocks with the same caches, without cross-attention), which
`sample` drives.

Examples:
    >>> import tensorflow as tf
    >>> from keras_seq import models, decoding
    >>> model = models.rnn_seq2seq(20, 12, units=8, embedding_dim=4)
    >>> decode = tf.function(lambda ids: decoding.greedy_decode(model, ids, max_length=5))
    >>> tuple(decode(tf.constant([[5, 6, 7, 0], [4, 4, 0, 0]])).shape)
    (2, 5)
"""

from keras_seq.decoding.sampling import sample
from keras_seq.decoding.search import (
    beam_search,
    beam_search_steps,
    greedy_decode,
    greedy_decode_steps,
    sequence_log_probability,
)
from keras_seq.decoding.steps import (
    DecoderSteps,
    attention_weights,
    decoder_steps,
    language_model_steps,
)

__all__ = [
    "DecoderSteps",
    "attention_weights",
    "beam_search",
    "beam_search_steps",
    "decoder_steps",
    "greedy_decode",
    "greedy_decode_steps",
    "language_model_steps",
    "sample",
    "sequence_log_probability",
]
