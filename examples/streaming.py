"""A streaming sensor classifier: trained on whole sequences, run on the device chunk by chunk.

    python examples/streaming.py [--train 3000] [--epochs 6] [--test 200] [--out streaming]

The task: a 3-channel sensor stream (noise and a slow drift) in which a
gesture sometimes occurs: a 6-step rising ramp on channel 0 together with a
dip on channel 1. At every step the model says whether a gesture has ended
within the last 12 steps, so it must remember what it saw, as a keyword
spotter must.

The script trains a GRU + PeepholeLSTM classifier on whole sequences, makes
its `keras_seq.export.streaming_model` (states as inputs and outputs),
converts that to a builtin-only `.tflite` (float32, and with int8 weights:
``quantize="dynamic"``) and to ONNX (`convert_to_onnx`: one ``GRU`` and one
``LSTM`` node, the states their ``initial_h``/``initial_c`` inputs and
``Y_h``/``Y_c`` outputs), and runs the files with `ai_edge_litert` and
onnxruntime (one thread each) the way a device or a server does: the stream
fed a chunk at a time, the states carried between calls. It prints:

- parity: the largest difference between the LiteRT and onnxruntime
  outputs, chunk by chunk, and the Keras model run on the whole sequences;
- latency: the median time of one call with a chunk of 1 step and of 10
  steps (batch 1), in each runtime;
- the int8-weight model's per-step argmax agreement with the float Keras
  model (target: at least 99.5%), and both accuracies.
"""

import argparse
import os
import statistics
import tempfile
import time

import keras
import numpy as np

from keras_seq import layers
from keras_seq.export import (
    convert_to_onnx,
    convert_to_tflite,
    initial_streaming_states,
    streaming_model,
)

CHANNELS = 3
GESTURE = 6  # steps of a gesture
MEMORY = 12  # a gesture is reported for this many steps after it ends


def make_streams(count: int, length: int, rng: np.random.Generator, return_starts=False):
    """``(x, y)``: ``(count, length, 3)`` float32 streams and ``(count, length)``
    labels (and each stream's gesture starts, with ``return_starts``)."""
    x = rng.normal(0.0, 0.35, (count, length, CHANNELS))
    x += np.cumsum(rng.normal(0.0, 0.03, (count, length, CHANNELS)), axis=1)  # drift
    y = np.zeros((count, length), np.int32)
    ramp = np.linspace(0.4, 1.6, GESTURE)
    all_starts = []
    for row in range(count):
        starts = rng.choice(length - GESTURE, size=rng.integers(0, 4), replace=False)
        for start in starts:
            x[row, start : start + GESTURE, 0] += ramp
            x[row, start : start + GESTURE, 1] -= 1.0
            end = start + GESTURE - 1
            y[row, end : end + MEMORY + 1] = 1
        all_starts.append(sorted(int(s) for s in starts))
    x = x.astype(np.float32)
    return (x, y, all_starts) if return_starts else (x, y)


def build_model() -> keras.Model:
    inputs = keras.Input((None, CHANNELS), name="sensor")
    h = keras.layers.Dense(32, activation="relu")(inputs)
    h = layers.GRU(64, return_sequences=True, name="gru")(h)
    h = layers.PeepholeLSTM(64, return_sequences=True, name="lstm")(h)
    return keras.Model(inputs, keras.layers.Dense(2, name="gesture")(h), name="gesture_spotter")


class Stream:
    """A converted streaming model, fed a chunk at a time, its states carried.

    ``call(chunk, states) -> [outputs, *new_states]`` runs the file once.
    """

    def __init__(self, call, stream: keras.Model):
        self.call = call
        self.stream = stream

    def run(self, x: np.ndarray, chunk: int) -> np.ndarray:
        """The outputs of ``x`` fed ``chunk`` steps at a time."""
        states = initial_streaming_states(self.stream, len(x))
        pieces = []
        for start in range(0, x.shape[1], chunk):
            outputs = self.call(x[:, start : start + chunk], states)
            pieces.append(outputs[0])
            states = outputs[1:]
        return np.concatenate(pieces, axis=1)

    def latency_ms(self, chunk: int, runs: int = 200) -> float:
        """Median ms of one call with a ``(1, chunk, 3)`` chunk."""
        x = np.zeros((1, chunk, CHANNELS), np.float32)
        states = initial_streaming_states(self.stream, 1)
        self.call(x, states)  # sizes the tensors
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            states = self.call(x, states)[1:]
            times.append(time.perf_counter() - t0)
        return 1000 * statistics.median(times)


def litert_stream(flatbuffer: bytes, stream: keras.Model) -> Stream:
    """A `.tflite` streaming model, run through its signature."""
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_content=flatbuffer, num_threads=1).get_signature_runner()
    names = [t.name for t in stream.inputs]

    def call(chunk, states):
        named = runner(**dict(zip(names, [chunk, *states])))
        return [named[f"output_{i}"] for i in range(len(named))]

    return Stream(call, stream)


def onnx_stream(model_bytes: bytes, stream: keras.Model) -> Stream:
    """An ``.onnx`` streaming model in onnxruntime: the inputs carry the
    streaming model's names (``sensor``, ``gru_state_0``, ``lstm_state_0``,
    ``lstm_state_1``); the outputs are the logits, then the new states."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(model_bytes, options,
                                           providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def call(chunk, states):
        return session.run(None, dict(zip(names, [chunk, *states])))

    return Stream(call, stream)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", type=int, default=3000, help="training streams")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--length", type=int, default=100, help="steps per stream")
    parser.add_argument("--test", type=int, default=200, help="test streams")
    parser.add_argument("--out", default=None, help="also write the .tflite and .onnx files here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    x_train, y_train = make_streams(args.train, args.length, rng)
    x_test, y_test = make_streams(args.test, args.length, rng)
    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.fit(x_train, y_train, batch_size=64, epochs=args.epochs, verbose=2)
    keras_logits = np.asarray(model.predict(x_test, batch_size=256, verbose=0))
    keras_labels = keras_logits.argmax(-1)

    stream = streaming_model(model)
    float_file = convert_to_tflite(stream)
    int8_file = convert_to_tflite(stream, quantize="dynamic")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        for name, flatbuffer in (("stream.tflite", float_file),
                                 ("stream_int8_weights.tflite", int8_file)):
            with open(os.path.join(args.out, name), "wb") as f:
                f.write(flatbuffer)
    with tempfile.TemporaryDirectory() as scratch:
        # The PeepholeLSTM's node has peepholes (input P): convert_to_onnx
        # warns that the OpenVINO provider would drop them; onnxruntime's CPU
        # provider, used here, computes them.
        onnx_path = convert_to_onnx(stream, os.path.join(args.out or scratch, "stream.onnx"))
        with open(onnx_path, "rb") as f:
            onnx_file = f.read()
    float_stream = litert_stream(float_file, stream)
    int8_stream = litert_stream(int8_file, stream)
    onnx_runner = onnx_stream(onnx_file, stream)
    parity = {chunk: float(np.abs(float_stream.run(x_test, chunk) - keras_logits).max())
              for chunk in (1, 10)}
    onnx_parity = {chunk: float(np.abs(onnx_runner.run(x_test, chunk) - keras_logits).max())
                   for chunk in (1, 10)}
    int8_labels = int8_stream.run(x_test, 10).argmax(-1)
    result = {
        "parity_chunk_1": parity[1],
        "parity_chunk_10": parity[10],
        "onnx_parity_chunk_1": onnx_parity[1],
        "onnx_parity_chunk_10": onnx_parity[10],
        "latency_ms_chunk_1": float_stream.latency_ms(1),
        "latency_ms_chunk_10": float_stream.latency_ms(10),
        "int8_latency_ms_chunk_1": int8_stream.latency_ms(1),
        "int8_latency_ms_chunk_10": int8_stream.latency_ms(10),
        "onnx_latency_ms_chunk_1": onnx_runner.latency_ms(1),
        "onnx_latency_ms_chunk_10": onnx_runner.latency_ms(10),
        "keras_accuracy": float(np.mean(keras_labels == y_test)),
        "int8_accuracy": float(np.mean(int8_labels == y_test)),
        "int8_agreement": float(np.mean(int8_labels == keras_labels)),
        "float_kb": len(float_file) / 1024,
        "int8_kb": len(int8_file) / 1024,
        "onnx_kb": len(onnx_file) / 1024,
    }
    steps = args.test * args.length
    print(f"test: {args.test} streams of {args.length} steps ({steps} per-step decisions)")
    print(f"parity, LiteRT chunk by chunk vs Keras on whole sequences: max |logit diff| "
          f"{result['parity_chunk_1']:.2e} (chunks of 1), {result['parity_chunk_10']:.2e} "
          f"(chunks of 10)")
    print(f"latency per call, batch 1, float32 ({result['float_kb']:.0f} kB): "
          f"{result['latency_ms_chunk_1']:.3f} ms (1 step), "
          f"{result['latency_ms_chunk_10']:.3f} ms (10 steps)")
    print(f"latency per call, batch 1, int8 weights ({result['int8_kb']:.0f} kB): "
          f"{result['int8_latency_ms_chunk_1']:.3f} ms (1 step), "
          f"{result['int8_latency_ms_chunk_10']:.3f} ms (10 steps)")
    print(f"parity, onnxruntime chunk by chunk vs Keras: max |logit diff| "
          f"{result['onnx_parity_chunk_1']:.2e} (chunks of 1), "
          f"{result['onnx_parity_chunk_10']:.2e} (chunks of 10)")
    print(f"latency per call, batch 1, onnxruntime ({result['onnx_kb']:.0f} kB): "
          f"{result['onnx_latency_ms_chunk_1']:.3f} ms (1 step), "
          f"{result['onnx_latency_ms_chunk_10']:.3f} ms (10 steps)")
    print(f"accuracy: Keras {result['keras_accuracy']:.2%}, int8 weights "
          f"{result['int8_accuracy']:.2%}; int8 argmax agreement with Keras "
          f"{result['int8_agreement']:.2%} (target 99.5%)")
    return result


if __name__ == "__main__":
    main()
