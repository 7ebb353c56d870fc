"""Native ONNX recurrent nodes against Loops, and LiteRT, on one CPU thread (not a test).

Each model is converted four ways and run on the same inputs:

- ``onnx native``: ``convert_to_onnx(model)`` (one ``LSTM``/``GRU`` node per
  layer), onnxruntime's CPU provider;
- ``onnx Loop``: ``convert_to_onnx(model, native_recurrent=False)`` (tf2onnx's
  ``Loop`` of the layer's step), onnxruntime's CPU provider;
- ``litert WHILE``: ``convert_to_tflite(model)`` (builtin ops, a WHILE loop),
  ai_edge_litert;
- ``litert fused``: ``convert_to_tflite(model, fuse_lstm=True, batch_size=B)``
  (``UNIDIRECTIONAL_SEQUENCE_LSTM``), for the models whose layers it fuses.

Models: ``PeepholeLSTM``, ``CoupledGateLSTM`` (with and without peepholes),
``GRU``, each ``(B, T, input_dim) -> (B, units)``, and a 2-layer seq2seq
encoder: token ids (0 = padding, a mask) -> ``Embedding`` ->
``Bidirectional(GRU, return_sequences)`` -> ``GRU``; at batch 64 its rows have
lengths from T/2 to T (right padding), at batch 1 the full T.

Every runtime uses one thread (onnxruntime: ``intra_op_num_threads=1``,
``inter_op_num_threads=1``; LiteRT: ``num_threads=1``). After a warm-up, each
repetition runs every form once, in an order that alternates between
repetitions; the table gives medians, the ratio native / Loop, each form's
largest difference from Keras, and each conversion's wall time (median of
``--conversions`` conversions).

    python benchmarks/onnx_recurrent.py
    python benchmarks/onnx_recurrent.py --batches 1 --repeats 200 --models GRU
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# tf2onnx's optimisers in place (what keras_seq.export does by default).
os.environ.setdefault("TF2ONNX_CATCH_ERRORS", "FALSE")

MODELS = ("PeepholeLSTM", "CoupledGateLSTM", "CoupledGateLSTM+peepholes", "GRU", "seq2seq encoder")
FORMS = ("onnx native", "onnx Loop", "litert WHILE", "litert fused")


def _parse():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=50, help="time steps T")
    parser.add_argument("--input-dim", type=int, default=32)
    parser.add_argument("--units", type=int, default=128)
    parser.add_argument("--vocabulary", type=int, default=1000, help="the encoder's token ids")
    parser.add_argument("--batches", default="1,64")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=200, help="timed runs per form at batch 1")
    parser.add_argument("--repeats-large", type=int, default=40, help="timed runs at other batches")
    parser.add_argument("--conversions", type=int, default=3, help="timed conversions per form")
    return parser.parse_args()


def build(name, args):
    import keras

    from keras_seq import layers

    keras.utils.set_random_seed(0)
    if name == "seq2seq encoder":
        ids = keras.Input((None,), dtype="int32", name="ids")
        x = keras.layers.Embedding(args.vocabulary, args.input_dim, mask_zero=True)(ids)
        x = keras.layers.Bidirectional(layers.GRU(args.units, return_sequences=True))(x)
        model = keras.Model(ids, layers.GRU(args.units)(x), name="encoder")
    else:
        x = keras.Input((None, args.input_dim), name="x")
        layer = {
            "PeepholeLSTM": lambda: layers.PeepholeLSTM(args.units),
            "CoupledGateLSTM": lambda: layers.CoupledGateLSTM(args.units),
            "CoupledGateLSTM+peepholes": lambda: layers.CoupledGateLSTM(args.units,
                                                                        use_peepholes=True),
            "GRU": lambda: layers.GRU(args.units),
        }[name]()
        model = keras.Model(x, layer(x))
    # Random weights, peepholes and biases included: every input of the nodes counts.
    rng = keras.random.SeedGenerator(1)
    for weight in model.weights:
        weight.assign(keras.random.normal(weight.shape, stddev=0.2, seed=rng))
    return model


def inputs(name, batch, args):
    import numpy as np

    rng = np.random.default_rng(batch)
    if name != "seq2seq encoder":
        return rng.normal(size=(batch, args.length, args.input_dim)).astype("float32")
    ids = rng.integers(1, args.vocabulary, (batch, args.length)).astype("int32")
    if batch > 1:
        lengths = rng.integers(args.length // 2, args.length + 1, batch)
        ids[np.arange(args.length)[None, :] >= lengths[:, None]] = 0
    return ids


def _timed(convert_once, conversions):
    """The result of a conversion and the median of ``conversions`` timed runs of it."""
    times, result = [], None
    for _ in range(conversions):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convert_to_onnx's note on peepholes
            result = convert_once()
        times.append(time.perf_counter() - start)
    return result, statistics.median(times)


def onnx_form(model, native, args, folder):
    """``(runner, conversion seconds)`` of the model in onnxruntime, one thread."""
    import onnxruntime

    from keras_seq.export import convert_to_onnx

    path = os.path.join(folder, f"{native}.onnx")
    _, seconds = _timed(lambda: convert_to_onnx(model, path, native_recurrent=native),
                        args.conversions)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name
    return (lambda x: session.run(None, {input_name: x})[0]), seconds


def litert_form(model, fuse, batch, args):
    """``(runner, conversion seconds)`` of the model in LiteRT, one thread."""
    from ai_edge_litert.interpreter import Interpreter

    from keras_seq.export import convert_to_tflite

    flatbuffer, seconds = _timed(
        lambda: convert_to_tflite(model, fuse_lstm=fuse, batch_size=batch if fuse else None),
        args.conversions,
    )
    interpreter = Interpreter(model_content=flatbuffer, num_threads=1)
    index = interpreter.get_input_details()[0]["index"]
    output = interpreter.get_output_details()[0]["index"]
    shape = None

    def run(x):
        nonlocal shape
        if x.shape != shape:
            interpreter.resize_tensor_input(index, x.shape, strict=False)
            interpreter.allocate_tensors()
            shape = x.shape
        interpreter.set_tensor(index, x)
        interpreter.invoke()
        return interpreter.get_tensor(output)

    return run, seconds


def measure(runners, x, warmup, repeats):
    names = list(runners)
    times = {name: [] for name in names}
    for repetition in range(warmup + repeats):
        order = names if repetition % 2 == 0 else names[::-1]
        for name in order:
            start = time.perf_counter()
            runners[name][0](x)
            elapsed = time.perf_counter() - start
            if repetition >= warmup:
                times[name].append(elapsed * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}


def main():
    args = _parse()
    import numpy as np

    rows = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        model = build(name, args)
        with tempfile.TemporaryDirectory() as folder:
            # Dynamic batch and length: one conversion serves every batch.
            shared = {
                "onnx native": onnx_form(model, True, args, folder),
                "onnx Loop": onnx_form(model, False, args, folder),
                "litert WHILE": litert_form(model, False, None, args),
            }
            for batch in [int(b) for b in args.batches.split(",")]:
                forms = dict(shared)
                if name not in ("seq2seq encoder", "GRU"):  # fuse_lstm: unmasked LSTMs only
                    forms["litert fused"] = litert_form(model, True, batch, args)
                x = inputs(name, batch, args)
                reference = np.asarray(model(x))
                errors = {f: float(np.abs(run(x) - reference).max()) for f, (run, _) in forms.items()}
                repeats = args.repeats if batch == 1 else args.repeats_large
                medians = measure(forms, x, args.warmup, repeats)
                ratio = medians["onnx native"] / medians["onnx Loop"]
                rows.append((name, batch, medians, errors, {f: s for f, (_, s) in forms.items()},
                             ratio))
                print(f"{name} B{batch}: "
                      + ", ".join(f"{f} {m:.3f} ms" for f, m in medians.items())
                      + f"; native/Loop {ratio:.2f}", flush=True)

    print()
    print(f"T={args.length}, input {args.input_dim}, {args.units} units, one thread; "
          f"medians of {args.repeats} (B1) / {args.repeats_large} (larger B) interleaved runs")
    print()
    print("| model | batch | " + " | ".join(f"{f} ms" for f in FORMS)
          + " | native / Loop | max abs error vs Keras (native, Loop, WHILE, fused) "
          "| conversion s (native, Loop, WHILE, fused) |")
    print("|---|---|" + "---|" * (len(FORMS) + 3))
    for name, batch, medians, errors, seconds, ratio in rows:
        cells = [f"{medians[f]:.3f}" if f in medians else "—" for f in FORMS]
        error_cells = ", ".join(f"{errors[f]:.0e}" if f in errors else "—" for f in FORMS)
        second_cells = ", ".join(f"{seconds[f]:.1f}" if f in seconds else "—" for f in FORMS)
        print(f"| {name} | {batch} | " + " | ".join(cells)
              + f" | **{ratio:.2f}** | {error_cells} | {second_cells} |")


if __name__ == "__main__":
    main()
