"""Batch-1 TFLite latency of a PeepholeLSTM: fused kernel vs WHILE loop (not a test).

A ``PeepholeLSTM(units)`` on ``(1, T, input_dim)`` inputs, converted twice:

- fused: ``convert_to_tflite(model, fuse_lstm=True)`` (one
  ``UNIDIRECTIONAL_SEQUENCE_LSTM`` op, batch 1);
- WHILE: ``convert_to_tflite(model)`` (the layer's loop as a WHILE op; dynamic
  batch and length, resized to ``(1, T, input_dim)``).

Both run on ai_edge_litert with ``--threads`` threads; after a warm-up, each
repetition invokes the two interpreters once, in alternating order, on the same
input. Prints the median and 90th percentile of each and the ratio of medians.

    python benchmarks/tflite_fused_lstm.py
    python benchmarks/tflite_fused_lstm.py --length 100 --units 256
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _parse():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=50, help="time steps T")
    parser.add_argument("--input-dim", type=int, default=32)
    parser.add_argument("--units", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1, help="interpreter threads")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=300, help="timed invokes per model")
    return parser.parse_args()


def main():
    args = _parse()
    import keras
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    from keras_seq.export import convert_to_tflite, tflite_op_names
    from keras_seq.layers import PeepholeLSTM

    inputs = keras.Input((None, args.input_dim))
    model = keras.Model(inputs, PeepholeLSTM(args.units)(inputs))
    flatbuffers = {
        "fused": convert_to_tflite(model, fuse_lstm=True),
        "WHILE": convert_to_tflite(model),
    }
    x = np.random.default_rng(0).normal(size=(1, args.length, args.input_dim)).astype("float32")
    reference = model(x).numpy()
    runners = {}
    for name, flatbuffer in flatbuffers.items():
        interpreter = Interpreter(model_content=flatbuffer, num_threads=args.threads)
        index = interpreter.get_input_details()[0]["index"]
        interpreter.resize_tensor_input(index, x.shape, strict=False)
        interpreter.allocate_tensors()
        interpreter.set_tensor(index, x)
        interpreter.invoke()
        output = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
        error = float(np.max(np.abs(output - reference)))
        ops = sorted(op for op in tflite_op_names(flatbuffer) if op in ("WHILE", "UNIDIRECTIONAL_SEQUENCE_LSTM"))
        print(f"{name:6s} ops {ops}, size {len(flatbuffer)} bytes, max |error| vs Keras {error:.1e}")
        runners[name] = (interpreter, index)

    times = {name: [] for name in runners}
    names = list(runners)
    for repetition in range(args.warmup + args.repeats):
        order = names if repetition % 2 == 0 else names[::-1]
        for name in order:
            interpreter, index = runners[name]
            interpreter.set_tensor(index, x)
            start = time.perf_counter()
            interpreter.invoke()
            elapsed = time.perf_counter() - start
            if repetition >= args.warmup:
                times[name].append(elapsed * 1e3)
    print(f"PeepholeLSTM({args.units}), input (1, {args.length}, {args.input_dim}), "
          f"{args.threads} thread(s), {args.repeats} invokes each:")
    for name, values in times.items():
        p90 = statistics.quantiles(values, n=10)[-1]
        print(f"  {name:6s} median {statistics.median(values):.3f} ms   p90 {p90:.3f} ms")
    ratio = statistics.median(times["fused"]) / statistics.median(times["WHILE"])
    print(f"  fused / WHILE (medians): {ratio:.2f}")


if __name__ == "__main__":
    main()
