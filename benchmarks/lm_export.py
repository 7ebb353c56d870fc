"""Export of a language-model run: seconds per artifact, and per-token latency (not a test).

For each ``--runs`` folder (``keras-seq train --task lm --model KIND``; the
weights do not matter, one short epoch will do), in one process:

- seconds to write ``lm_step.tflite`` (`convert_language_model_step_to_tflite`),
  ``lm_stream.onnx`` as the export now writes it
  (`language_model_stream_function`) and as it was written before (the
  `streaming_model` converted whole: one ``Loop`` per residual block), and
  Keras' greedy reference (`write_lm_reference`);
- milliseconds per token of a generation loop at batch 1 (one token per
  call, 200 calls, the state carried): LiteRT on ``lm_step.tflite``,
  onnxruntime on both ONNX forms, each runtime on one thread; repetitions
  interleaved, medians; and each as a ratio to ``lm_step.tflite``.

    keras-seq train --task lm --model mingru --epochs 1 --steps-per-epoch 10 --name mingru
    python benchmarks/lm_export.py --runs runs/mingru runs/xlstm runs/rnn --json lm_export.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np

_TOKENS = 200


def _seconds(function):
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def _tflite_loop(path):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path, num_threads=1)
    interpreter.allocate_tensors()
    inputs, outputs = interpreter.get_input_details(), interpreter.get_output_details()

    def run():
        states = [np.zeros(d["shape"], np.float32) for d in inputs[1:]]
        for _ in range(_TOKENS):
            interpreter.set_tensor(inputs[0]["index"], np.array([5], np.int32))
            for d, state in zip(inputs[1:], states):
                interpreter.set_tensor(d["index"], state)
            interpreter.invoke()
            states = [interpreter.get_tensor(d["index"]) for d in outputs[1:]]

    return run


def _onnx_loop(path):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    widths = [i.shape[-1] for i in session.get_inputs()[1:]]

    def run():
        states = [np.zeros((1, w), np.float32) for w in widths]
        for _ in range(_TOKENS):
            _, *states = session.run(None, dict(zip(names, [np.array([[5]], np.int32),
                                                            *states])))

    return run


def measure(run_dir, repetitions):
    from keras_seq.export.language_model_export import (
        PROMPT_LENGTH,
        PROMPTS,
        held_out_prompts,
        language_model_stream_function,
        write_lm_reference,
    )
    from keras_seq.export.onnx_export import convert_to_onnx
    from keras_seq.export.streaming import streaming_model
    from keras_seq.export.tflite_export import convert_language_model_step_to_tflite
    from keras_seq.reserved_tokens import RESERVED_TOKENS
    from keras_seq.run_folder import read_run

    run = read_run(run_dir, "lm_export")
    model = run.load_model(compile=False)
    context = int(run.config["context"])
    folder = tempfile.mkdtemp(prefix="lm_export-")
    paths = {name: os.path.join(folder, name) for name in
             ("lm_step.tflite", "lm_stream.onnx", "lm_stream_before.onnx")}
    seconds = {}

    def write_step():
        with open(paths["lm_step.tflite"], "wb") as f:
            f.write(convert_language_model_step_to_tflite(model, context))

    def write_stream():
        stream, signature = language_model_stream_function(model)
        convert_to_onnx(stream, paths["lm_stream.onnx"], signature)

    def write_before():
        convert_to_onnx(streaming_model(model), paths["lm_stream_before.onnx"])

    def write_reference():
        prompts = held_out_prompts(run.held_out_text(), PROMPTS, PROMPT_LENGTH)
        write_lm_reference(os.path.join(folder, "reference.npz"), model, run.load_tokenizer(),
                           prompts, context, list(range(1, len(RESERVED_TOKENS))))

    for name, write in (("lm_step.tflite", write_step), ("lm_stream.onnx", write_stream),
                        ("lm_stream.onnx before", write_before),
                        ("reference.npz", write_reference)):
        seconds[name] = round(_seconds(write)[0], 1)
    loops = {"lm_step.tflite": _tflite_loop(paths["lm_step.tflite"]),
             "lm_stream.onnx": _onnx_loop(paths["lm_stream.onnx"]),
             "lm_stream.onnx before": _onnx_loop(paths["lm_stream_before.onnx"])}
    times = {name: [] for name in loops}
    for loop in loops.values():
        loop()  # warm up
    for repetition in range(repetitions):
        order = list(loops)[repetition % len(loops):] + list(loops)[:repetition % len(loops)]
        for name in order:
            times[name].append(_seconds(loops[name])[0])
    ms = {name: 1000 * statistics.median(t) / _TOKENS for name, t in times.items()}
    step = ms["lm_step.tflite"]
    return {
        "run": os.path.basename(os.path.normpath(run_dir)),
        "seconds": seconds,
        "ms_per_token": {name: round(v, 4) for name, v in ms.items()},
        "ratio_to_lm_step": {name: round(v / step, 2) for name, v in ms.items()},
        "sizes_mb": {name: round(os.path.getsize(p) / 2**20, 2) for name, p in
                     (("lm_step.tflite", paths["lm_step.tflite"]),
                      ("lm_stream.onnx", paths["lm_stream.onnx"]),
                      ("lm_stream.onnx before", paths["lm_stream_before.onnx"]))},
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", required=True, help="keras-seq train --task lm runs")
    parser.add_argument("--repetitions", type=int, default=9)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    rows = []
    for run_dir in args.runs:
        row = measure(run_dir, args.repetitions)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
