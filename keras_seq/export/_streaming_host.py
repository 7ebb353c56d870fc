"""The host loop of a streaming translator (`streaming_translation`), NumPy and LiteRT only.

Imported by `keras_seq.export.tflite_streaming_translate` and, by its file
name, by the verify worker, which runs the exported files without keras_seq:
it imports nothing of the package.
"""

import numpy as np


def stream_translate(encoder_step: bytes, decoder_step: bytes, chunks, max_length: int,
                     start_id: int, end_id: int):
    """``(tokens, emitted)`` of one source fed as ``chunks`` (1-D int arrays).

    After each chunk the decoder step runs, and its token is kept, while the
    hard alignment lands inside the source read so far; a step whose
    alignment is all zeros (it would stop past the end) is dropped and tried
    again with the next chunk. After the last chunk it decodes until
    ``end_id`` or ``max_length`` tokens. ``emitted``: the number of tokens
    out once each chunk was read.
    """
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    # LiteRT's builtin kernels, without its default XNNPACK delegate: fed the
    # growing memory, a fresh XNNPACK interpreter gave another hard alignment
    # (and other tokens) in 1 of 4 runs here; the builtin kernels, every time
    # the same tokens as greedy decoding (benchmarks/RESULTS.md).
    builtin = {"experimental_op_resolver_type":
               OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}
    encode = Interpreter(model_content=encoder_step, **builtin).get_signature_runner()
    decode = Interpreter(model_content=decoder_step, **builtin).get_signature_runner()
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
        chunk = np.asarray(chunk, np.int32).reshape(1, -1)
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
