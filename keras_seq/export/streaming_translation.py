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
    from keras_seq.export._checks import check_seq2seq
    from keras_seq.models.seq2seq import seq2seq_kind

    check_seq2seq(where, model)
    decoder = model.get_layer("decoder") if seq2seq_kind(model) == "rnn" else None
    if decoder is None or not decoder.monotonic:
        raise invalid_value(
            where, "model", "an rnn_seq2seq model with attention='monotonic_bahdanau' or "
            "'monotonic_luong' (soft attention reads the whole source at every step)",
            model.name)
    return decoder


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

    from keras_seq import decoding
    from keras_seq.export._checks import check_quantize
    from keras_seq.export.streaming import streaming_model
    from keras_seq.export.tflite_export import convert_to_tflite

    where = "convert_streaming_translator_to_tflite"
    decoder = _check_monotonic(where, model)
    check_quantize(where, quantize)
    encoder_step = convert_to_tflite(streaming_model(model.get_layer("encoder")),
                                     quantize=quantize)
    steps = decoding.decoder_steps(model)
    width = model.get_layer("encoder").output.shape[-1]
    num_cell_states = decoder.num_states - 1
    signature = [
        tf.TensorSpec([None], tf.int32, name="token"),
        tf.TensorSpec([None, None, width], tf.float32, name="memory"),
        *(tf.TensorSpec([None, decoder.units], tf.float32, name=f"state_{i}")
          for i in range(num_cell_states)),
        tf.TensorSpec([None, None], tf.float32, name=f"state_{num_cell_states}"),
    ]

    def step(token, memory, *states):
        constants = {"h": memory, "mask": tf.ones(tf.shape(memory)[:2], tf.bool),
                     "processed_key": decoder.precompute_keys(memory)}
        logits, state = steps.step(token, tf.constant(0), constants, {"s": list(states)})
        return (tf.cast(logits, tf.float32), *state["s"])

    step.keras_models = (model,)
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
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from keras_seq.reserved_tokens import END_ID, START_ID

    where = "tflite_streaming_translate"
    max_length = check_positive_int(where, "max_length", max_length)
    chunks = [np.asarray(chunk, np.int32).reshape(1, -1) for chunk in source_chunks]
    if not chunks or any(chunk.shape[1] == 0 for chunk in chunks):
        raise invalid_value(where, "source_chunks", "one or more non-empty chunks of ids",
                            [chunk.shape[1] for chunk in chunks])
    start_id = START_ID if start_id is None else start_id
    end_id = END_ID if end_id is None else end_id
    # LiteRT's builtin kernels, without its default XNNPACK delegate: fed the
    # growing memory, a fresh XNNPACK interpreter gave another hard alignment
    # (and other tokens) in 1 of 4 runs here; the builtin kernels, every time
    # the same tokens as greedy decoding (benchmarks/RESULTS.md).
    builtin = {"experimental_op_resolver_type":
               OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}
    encode = Interpreter(model_content=flatbuffers["encoder_step"],
                         **builtin).get_signature_runner()
    decode = Interpreter(model_content=flatbuffers["decoder_step"],
                         **builtin).get_signature_runner()
    encoder_states = {name: np.zeros((1, detail["shape_signature"][-1]), np.float32)
                      for name, detail in encode.get_input_details().items()
                      if name != "source_ids"}
    state_names = sorted((n for n in decode.get_input_details() if n.startswith("state_")),
                         key=lambda n: int(n.split("_")[1]))
    sizes = [decode.get_input_details()[n]["shape_signature"][-1] for n in state_names]
    states = [np.zeros((1, size), np.float32) for size in sizes[:-1]]
    alignment = np.zeros((1, 0), np.float32)
    memory = None
    tokens, emitted, token = [], [], start_id
    for index, chunk in enumerate(chunks):
        result = encode(source_ids=chunk, **encoder_states)
        encoder_states = {name: np.array(result[f"output_{i + 1}"])
                          for i, name in enumerate(sorted(encoder_states, key=_state_index))}
        chunk_memory = np.array(result["output_0"])
        memory = chunk_memory if memory is None else np.concatenate([memory, chunk_memory], 1)
        # The new positions hold no alignment yet; before any, it starts at the first.
        alignment = np.pad(alignment, ((0, 0), (0, memory.shape[1] - alignment.shape[1])))
        if index == 0:
            alignment[0, 0] = 1.0
        last = index == len(chunks) - 1
        while len(tokens) < max_length and (not tokens or tokens[-1] != end_id):
            feeds = dict(zip(state_names, [*states, alignment]))
            out = decode(token=np.array([token], np.int32), memory=memory, **feeds)
            new_alignment = out[f"output_{len(state_names)}"]
            if not last and not new_alignment.any():
                break  # it would stop past what has been read: wait for the next chunk
            # Copies: LiteRT may reuse its output buffers in the next call,
            # and a step that waits must leave these as they were.
            states = [np.array(out[f"output_{i + 1}"]) for i in range(len(state_names) - 1)]
            alignment = np.array(new_alignment)
            token = int(np.argmax(out["output_0"][0]))
            tokens.append(token)
        emitted.append(len(tokens))
    return tokens, emitted


def _state_index(name: str) -> int:
    return int(name.rpartition("_state_")[2])
