"""Translation that starts before the source ends: monotonic attention on a device.

An `rnn_seq2seq` model with ``attention="monotonic_bahdanau"`` or
``"monotonic_luong"`` reads its source left to right, starts its decoder from
zeros and attends with Raffel et al.'s (2017) hard monotonic alignment, which
never moves left: the decoder's step t needs only the source up to the first
position j, at or after the previous step's, where it chooses to stop
(p_j > 0.5). `convert_streaming_translator_to_tflite` converts such a model
into an encoder step (a chunk of source ids and the encoder's states in, the
chunk's annotations and new states out) and a decoder step (the previous
token, the annotations read so far and the decoder's states in, the logits
and new states out), builtin ops only; `tflite_streaming_translate` is the
host loop: after each source chunk it emits tokens until the alignment runs
past what has been read, and after the last chunk until ``[END]``. The tokens
are those of greedy decoding on the whole source.
"""

from __future__ import annotations

import numpy as np

from keras_seq._backend import EXPORT_THERE, require_tensorflow
from keras_seq._validation import check_positive_int, invalid_value

__all__ = ["convert_streaming_translator_to_tflite", "tflite_streaming_translate"]


def _check_monotonic(where, model):
    """The translator (`keras_seq.tasks.Seq2SeqLM`) ``model`` is, if it attends monotonically."""
    from keras_seq.export._checks import check_seq2seq
    from keras_seq.tasks import as_task

    check_seq2seq(where, model)
    task = as_task(model, where)
    if not task.monotonic:
        raise invalid_value(
            where, "model", "an rnn_seq2seq model with attention='monotonic_bahdanau' or "
            "'monotonic_luong' (soft attention reads the whole source at every step)",
            model.name)
    return task


def convert_streaming_translator_to_tflite(model, quantize: str | None = None) -> dict:
    """Converts a monotonic-attention translation model into two streaming steps.

    ``"encoder_step"``: ``source_ids (B, C)`` int32 (a chunk, any length) and
    the encoder's states ``encoder_rnn_state_{i} (B, units)`` ->
    ``output_0``, the chunk's annotations ``(B, C, units)``, then the new
    states. ``"decoder_step"``: ``token (B,)`` int32, ``memory (B, L,
    units)`` (every annotation so far), ``state_{i}``: the decoder cell's
    states ``(B, units)``, then the previous alignment ``(B, L)`` ->
    ``output_0``, the logits ``(B, V)``, then the new states (the alignment
    last). Builtin ops only.

    Args:
        model: an `rnn_seq2seq` model with monotonic attention.
        quantize: `None`, ``"dynamic"`` or ``"float16"`` (see `convert_to_tflite`).

    Returns:
        ``{"encoder_step": bytes, "decoder_step": bytes}``.
    """
    require_tensorflow("keras_seq.export.convert_streaming_translator_to_tflite", EXPORT_THERE)
    import tensorflow as tf

    from keras_seq.export._checks import check_quantize
    from keras_seq.export.streaming import streaming_model
    from keras_seq.export.tflite_export import convert_to_tflite

    where = "convert_streaming_translator_to_tflite"
    task = _check_monotonic(where, model)
    decoder = task.decoder
    check_quantize(where, quantize, integer=False)
    encoder_step = convert_to_tflite(streaming_model(task.encoder), quantize=quantize)
    width = task.encoder.output.shape[-1]
    num_cell_states = decoder.num_states - 1
    signature = [
        tf.TensorSpec([None], tf.int32, name="token"),
        tf.TensorSpec([None, None, width], tf.float32, name="memory"),
        *(tf.TensorSpec([None, decoder.units], tf.float32, name=f"state_{i}")
          for i in range(num_cell_states)),
        tf.TensorSpec([None, None], tf.float32, name=f"state_{num_cell_states}"),
    ]

    def step(token, memory, *states):
        cache = {"memory": {"h": memory, "mask": tf.ones(tf.shape(memory)[:2], tf.bool),
                            "processed_key": decoder.precompute_keys(memory)},
                 "state": {"s": list(states)}}
        logits, _, cache = task.call_with_cache(token, cache, tf.constant(0))
        return (tf.cast(logits, tf.float32), *cache["state"]["s"])

    step.keras_models = (task,)
    return {"encoder_step": encoder_step,
            "decoder_step": convert_to_tflite(step, signature, quantize=quantize)}


def tflite_streaming_translate(flatbuffers: dict, source_chunks, max_length: int,
                               start_id: int | None = None, end_id: int | None = None):
    """The host loop of `convert_streaming_translator_to_tflite`'s steps, for one source.

    After each chunk of source ids it runs the decoder step and keeps its
    token while the hard alignment lands inside the source read so far; a
    step whose alignment is all zeros (it would stop past the end) is
    dropped and tried again with the next chunk. After the last chunk it
    decodes until ``end_id`` or ``max_length`` tokens, as greedy decoding
    on the whole source does.

    Args:
        flatbuffers: the dict `convert_streaming_translator_to_tflite` returns.
        source_chunks: the source ids in order, a list of 1-D int arrays.
        max_length: the most tokens to emit.
        start_id: id fed as y_0. Default ``[START]``.
        end_id: id that ends the output. Default ``[END]``.

    Returns:
        ``(tokens, emitted)``: the output ids (``end_id`` included when
        reached), and the number of tokens emitted once each chunk was read.
    """
    from keras_seq.export._streaming_host import stream_translate
    from keras_seq.reserved_tokens import END_ID, START_ID

    where = "tflite_streaming_translate"
    max_length = check_positive_int(where, "max_length", max_length)
    chunks = [np.asarray(chunk, np.int32).reshape(1, -1) for chunk in source_chunks]
    if not chunks or any(chunk.shape[1] == 0 for chunk in chunks):
        raise invalid_value(where, "source_chunks", "one or more non-empty chunks of ids",
                            [chunk.shape[1] for chunk in chunks])
    return stream_translate(flatbuffers["encoder_step"], flatbuffers["decoder_step"], chunks,
                            max_length, START_ID if start_id is None else start_id,
                            END_ID if end_id is None else end_id)
