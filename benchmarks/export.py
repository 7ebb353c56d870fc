"""Batch-1 latency and size of a trained date model in every deployment form (not a test).

Rows, all translating one held-out example at a time (tokenize, encode, greedy
decoding to ``[END]``):

- Keras: `keras_seq.decoding.greedy_decode` in a `tf.function` (size: the
  float32 weights);
- SavedModel: the ``serving_default`` signature of `export_saved_model`
  (strings in, strings out; size: the folder);
- TFLite (WHILE), TFLite int8-dynamic, TFLite float16: the encoder and decoder
  step of `convert_decoder_steps_to_tflite` on ai_edge_litert, a greedy loop in
  NumPy (size: the two files);
- TFLite fused: the same with ``fuse_lstm=True`` (the encoder's LSTM layers as
  ``UNIDIRECTIONAL_SEQUENCE_LSTM``), filled in when
  `keras_seq.export.lstm_fusion` exists and the model has LSTM layers (train
  one with ``--cell peephole``, ``coupled`` or ``lstm``); layers that receive
  the source padding mask keep their loop, and the row then says so;
- onnxruntime: the ONNX encoder and decoder step, the same loop.

Candidates run interleaved (each repetition times every candidate once on the
next example, in a rotating order); the table reports the median and the 90th
percentile over repetitions, and how many examples each form decoded as Keras
does. Every runtime uses ``--threads`` threads.

    keras-seq train --name dates                    # the model (GRU, the default)
    python benchmarks/export.py --run runs/dates
    keras-seq train --name dates-peephole --cell peephole
    python benchmarks/export.py --run runs/dates-peephole   # with the fused row
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _parse():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default="runs/dates", help="a `keras-seq train` date run")
    parser.add_argument("--repeats", type=int, default=100, help="examples timed per form")
    parser.add_argument("--threads", type=int, default=1, help="threads of every runtime")
    return parser.parse_args()


ARGS = _parse()

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(ARGS.threads)
tf.config.threading.set_inter_op_parallelism_threads(ARGS.threads)

import keras  # noqa: E402

import keras_seq.layers  # noqa: E402, F401  (registers the layers for loading)
import keras_seq.models  # noqa: E402, F401
from keras_seq import data, decoding, text  # noqa: E402
from keras_seq.export import (  # noqa: E402
    convert_decoder_steps_to_onnx,
    convert_decoder_steps_to_tflite,
    export_saved_model,
    tflite_op_names,
)

_LSTM_CELLS = ("lstm", "peephole", "coupled")


class _HostLoop:
    """Encoder once, then the decoder step in a greedy loop, batch 1."""

    def __init__(self, encoder, step, num_outputs, target_length):
        self.encoder, self.step = encoder, step
        self.num_state = num_outputs - 1
        self.target_length = target_length

    def __call__(self, source_ids):
        outputs = self.encoder(source_ids)
        split = len(outputs) - self.num_state
        constants, state = outputs[:split], outputs[split:]
        tokens, ids = np.array([text.START_ID], np.int32), []
        for t in range(self.target_length):
            logits, *state = self.step(tokens, np.array(t, np.int32), *constants, *state)
            tokens = np.argmax(logits, -1).astype(np.int32)
            ids.append(int(tokens[0]))
            if ids[-1] == text.END_ID:
                break
        return ids


def _tflite(flatbuffer):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=flatbuffer, num_threads=ARGS.threads)
    inputs, outputs = interpreter.get_input_details(), interpreter.get_output_details()
    shapes = [None]

    def run(*arrays):
        if [a.shape for a in arrays] != shapes[0]:
            for d, a in zip(inputs, arrays):
                interpreter.resize_tensor_input(d["index"], a.shape, strict=False)
            interpreter.allocate_tensors()
            shapes[0] = [a.shape for a in arrays]
        for d, a in zip(inputs, arrays):
            interpreter.set_tensor(d["index"], a.astype(d["dtype"]))
        interpreter.invoke()
        return [interpreter.get_tensor(d["index"]) for d in outputs]

    return run, len(outputs)


def _onnx(path):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = ARGS.threads
    options.inter_op_num_threads = ARGS.threads
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return (lambda *arrays: session.run(None, dict(zip(names, arrays)))), len(
        session.get_outputs()
    )


def main() -> int:
    with open(os.path.join(ARGS.run, "metrics.json"), encoding="utf-8") as f:
        config = json.load(f)["config"]
    source_length, target_length = config["source_length"], config["target_length"]
    model = keras.saving.load_model(os.path.join(ARGS.run, "model.keras"), safe_mode=True)
    tokenizer = text.load_tokenizer(ARGS.run)
    test = data.date_task(0, 0, ARGS.repeats, seed=config.get("seed", 0))["test"]
    sources = [s for s, _ in test]
    source_ids = tokenizer.encode(sources, source_length).numpy()
    scratch = tempfile.mkdtemp(prefix="export-benchmark-")

    forms, sizes, notes, remarks = {}, {}, {}, {}
    greedy = tf.function(
        lambda ids: decoding.greedy_decode(model, ids, target_length),
        input_signature=[tf.TensorSpec([None, source_length], tf.int32)],
    )

    def keras_ids(i):
        row = greedy(source_ids[i : i + 1]).numpy()[0].tolist()
        return row[: row.index(text.END_ID) + 1] if text.END_ID in row else row

    forms["Keras"] = keras_ids
    sizes["Keras"] = sum(int(np.prod(v.shape)) * 4 for v in model.weights)

    path = export_saved_model(
        model, tokenizer, tokenizer, os.path.join(scratch, "translator", "1"),
        source_length, target_length,
    )
    serve = tf.saved_model.load(path).signatures["serving_default"]
    forms["SavedModel"] = lambda i: serve(inputs=tf.constant(sources[i : i + 1]))["outputs"]
    sizes["SavedModel"] = sum(
        os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files
    )

    for name, quantize in (("TFLite (WHILE)", None), ("TFLite int8-dynamic", "dynamic"),
                           ("TFLite float16", "float16")):
        encoder, step = convert_decoder_steps_to_tflite(model, target_length, quantize=quantize)
        loop = _HostLoop(_tflite(encoder)[0], *_tflite(step), target_length)
        forms[name] = lambda i, loop=loop: loop(source_ids[i : i + 1])
        sizes[name] = len(encoder) + len(step)

    name = "TFLite fused"
    if importlib.util.find_spec("keras_seq.export.lstm_fusion") is None:
        notes[name] = "keras_seq.export.lstm_fusion is not there yet"
    elif config.get("model", "rnn") != "rnn" or config.get("cell") not in _LSTM_CELLS:
        notes[name] = "no LSTM layer in this model (train with --cell peephole|coupled|lstm)"
    else:
        try:
            encoder, step = convert_decoder_steps_to_tflite(model, target_length, fuse_lstm=True)
            loop = _HostLoop(_tflite(encoder)[0], *_tflite(step), target_length)
            forms[name] = lambda i, loop=loop: loop(source_ids[i : i + 1])
            sizes[name] = len(encoder) + len(step)
            if "UNIDIRECTIONAL_SEQUENCE_LSTM" not in tflite_op_names(encoder):
                # The encoder's layers receive the source padding mask, which
                # the fused kernel cannot take: they keep their WHILE loop.
                remarks[name] = "no fused op in the encoder (masked layers keep their loop)"
        except Exception as error:  # report, and time the other forms
            notes[name] = f"conversion failed: {error!r}"[:200]

    encoder_path, step_path = convert_decoder_steps_to_onnx(
        model, os.path.join(scratch, "encoder.onnx"), os.path.join(scratch, "step.onnx"),
        target_length,
    )
    loop = _HostLoop(_onnx(encoder_path)[0], *_onnx(step_path), target_length)
    forms["onnxruntime"] = lambda i: loop(source_ids[i : i + 1])
    sizes["onnxruntime"] = os.path.getsize(encoder_path) + os.path.getsize(step_path)

    # Agreement with Keras (and warm-up): ids, or strings for the SavedModel.
    expected = [keras_ids(i) for i in range(len(sources))]
    expected_strings = [s.decode() for s in tokenizer.detokenize(expected).numpy()]
    agree = {}
    for name, form in forms.items():
        if name == "SavedModel":
            got = [form(i).numpy()[0].decode() for i in range(len(sources))]
            agree[name] = sum(g == e for g, e in zip(got, expected_strings))
        else:
            agree[name] = sum(form(i) == expected[i] for i in range(len(sources)))

    names = list(forms)
    times = {name: [] for name in names}
    for r in range(ARGS.repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            forms[name](r % len(sources))
            times[name].append(1000 * (time.perf_counter() - start))

    print(f"date model {ARGS.run}: {model.count_params()} parameters; batch 1, "
          f"{ARGS.threads} thread(s), {ARGS.repeats} examples")
    print(f"{'form':22s} {'size':>10s} {'median ms':>10s} {'p90 ms':>8s} {'= Keras':>8s}")
    for name in ["Keras", "SavedModel", "TFLite (WHILE)", "TFLite fused", "TFLite int8-dynamic",
                 "TFLite float16", "onnxruntime"]:
        if name in notes:
            print(f"{name:22s} {'-':>10s} {'-':>10s} {'-':>8s} {'-':>8s}  {notes[name]}")
            continue
        t = sorted(times[name])
        print(f"{name:22s} {sizes[name] / 1024:8.1f}kB {statistics.median(t):10.2f} "
              f"{t[int(0.9 * (len(t) - 1))]:8.2f} {agree[name]:4d}/{len(sources)}"
              + (f"  {remarks[name]}" if name in remarks else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
