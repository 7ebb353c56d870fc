"""Integer-only TFLite (``"int8"``, ``"int16x8"``) against float: quality, size, latency.

Three models, as the integer export's goals name them:

- ``--translator RUN_DIR``: a ``keras-seq train`` run (the main job). Exported
  with ``export_run(quantize=("dynamic", "int8", "int16x8"))`` and checked by
  ``verify``: exact match against the targets and against Keras, file
  sizes; then greedy decoding of one held-out source, batch 1, through the
  host loop (encoder + decoder steps), float, int8 and int16x8 interleaved.
- ``--lm RUN_DIR``: a ``keras-seq train --task lm`` run, the same way:
  next-token agreement with Keras, same text, one step's latency.
- ``--tagger RUN_DIR``: a ``keras-seq train --task tag`` run, the same way
  (``--tagger-windows 16 24 32 64``: one export per int8 window): token
  accuracy and agreement with Keras; the time to tag a sentence of the
  median held-out length, one of 64 words, and 200 held-out sentences one
  at a time (float runs each sentence's length in one call, int8 its
  window, in windows for a longer sentence).
- the streaming sensor classifier of ``examples/streaming.py`` (trained
  here, ``--sensor-train`` streams): its `streaming_model` in float, int8
  and int16x8 (calibrated with `streaming_calibration` on training streams), fed one
  step at a time: per-step accuracy, agreement with Keras, one step's
  latency.
- ``--fused-train N``: the same gestures spotted by an all-LSTM model (the
  GRU of ``examples/streaming.py`` made a second `PeepholeLSTM`, so that
  ``fuse_lstm=True`` fuses every layer), trained here on N streams, run
  over whole streams: the fused op in float and int8 (TFLite's integer
  LSTM kernel, any length), against the loop (float, WHILE) and int8's
  loop over the streams' static length. Per-step accuracy, agreement
  with Keras, file size, one stream's latency.

Latencies: LiteRT, one thread, with its default delegates, batch 1;
interleaved repetitions, medians, and the integer/float ratios.

    python benchmarks/integer_tflite.py --translator runs/dates --lm runs/lm-rnn --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np


def _interleaved_ms(calls: dict, repeats: int = 30) -> dict:
    """Median ms of each call, the calls interleaved."""
    times = {name: [] for name in calls}
    for call in calls.values():
        call()  # sizes the tensors
    for _ in range(repeats):
        for name, call in calls.items():
            t0 = time.perf_counter()
            call()
            times[name].append(1000 * (time.perf_counter() - t0))
    return {name: statistics.median(t) for name, t in times.items()}


def _verified(run_dir: str, out: str, examples: int,
              quantize=("dynamic", "int8", "int16x8")) -> list[dict]:
    from keras_seq.export import export_run, verify

    t0 = time.perf_counter()
    export_run(run_dir, out, formats=("tflite",), quantize=quantize,
               examples=examples, overwrite=True)
    seconds = time.perf_counter() - t0
    rows = verify(out)["artifacts"]
    for row in rows:
        row["export_seconds"] = round(seconds, 1)
    return [r for r in rows if r["format"] == "tflite"]


def translator(run_dir: str, scratch: str, examples: int) -> dict:
    from ai_edge_litert.interpreter import Interpreter

    out = os.path.join(scratch, "translator")
    rows = _verified(run_dir, out, examples)
    reference = np.load(os.path.join(out, "reference.npz"))
    source = reference["source_ids"][:1].astype(np.int32)
    with open(os.path.join(out, "tflite", "export.json")) as f:
        config = json.load(f)

    def greedy(folder):
        encoder = Interpreter(model_path=os.path.join(out, folder, "encoder.tflite"),
                              num_threads=1).get_signature_runner()
        step = Interpreter(model_path=os.path.join(out, folder, "decoder_step.tflite"),
                           num_threads=1).get_signature_runner()
        encoder_input = list(encoder.get_input_details())[0]

        def run():
            encoded = encoder(**{encoder_input: source})
            outputs = [encoded[f"output_{i}"] for i in range(len(encoded))]
            num_state = len(step.get_output_details()) - 1
            constants, state = outputs[:len(outputs) - num_state], outputs[len(outputs) - num_state:]
            token = np.array([config["start_id"]], np.int32)
            for t in range(config["target_length"]):
                named = step(tokens=token, t=np.int32(t),
                             **{f"constant_{i}": c for i, c in enumerate(constants)},
                             **{f"state_{i}": v for i, v in enumerate(state)})
                logits, *state = [named[f"output_{i}"] for i in range(len(named))]
                token = logits.argmax(-1).astype(np.int32)
                if token[0] == config["end_id"]:
                    break
        return run

    ms = _interleaved_ms({"float": greedy("tflite"), "int8": greedy("tflite_int8"),
                          "int16x8": greedy("tflite_int16x8")})
    return {"rows": rows, "greedy_ms_batch1": ms, "int8_over_float": ms["int8"] / ms["float"],
            "int16x8_over_float": ms["int16x8"] / ms["float"]}


def language_model(run_dir: str, scratch: str, examples: int) -> dict:
    from ai_edge_litert.interpreter import Interpreter

    out = os.path.join(scratch, "lm")
    rows = _verified(run_dir, out, examples)
    with open(os.path.join(out, "export.json")) as f:
        config = json.load(f)

    def step(file):
        runner = Interpreter(model_path=os.path.join(out, file),
                             num_threads=1).get_signature_runner()
        state = {f"state_{i}": np.zeros([1, *shape[1:]], np.float32)
                 for i, shape in enumerate(config["state_shapes"])}
        extra = {"t": np.int32(0)} if "t" in runner.get_input_details() else {}
        return lambda: runner(token=np.array([5], np.int32), **extra, **state)

    ms = _interleaved_ms({"float": step("lm_step.tflite"), "int8": step("lm_step_int8.tflite"),
                          "int16x8": step("lm_step_int16x8.tflite")}, repeats=200)
    return {"rows": rows, "step_ms_batch1": ms, "int8_over_float": ms["int8"] / ms["float"],
            "int16x8_over_float": ms["int16x8"] / ms["float"]}


def tagger(run_dir: str, scratch: str, examples: int, window: int) -> dict:
    import keras_seq.recipes.tagging as tagging

    finders = list(sys.meta_path)
    try:  # the verify worker's host, without its block on keras_seq imports
        from keras_seq.export._verify_worker import TFLiteModel, host_tagger_ids, windowed
    finally:
        sys.meta_path[:] = finders

    tagging.INTEGER_WINDOW = window  # the default, or one of a sweep
    out = os.path.join(scratch, f"tagger{window}")
    rows = _verified(run_dir, out, examples)
    reference = np.load(os.path.join(out, "reference.npz"))
    sentences = [str(t).split() for t in reference["texts"]]
    with open(os.path.join(out, "tflite_int8", "export.json")) as f:
        window = json.load(f)["window"]
    median = sorted(sentences, key=len)[len(sentences) // 2]
    long = (sentences[int(np.argmax([len(s) for s in sentences]))] * 64)[:64]
    files = {kind: TFLiteModel(os.path.join(out, folder, "tagger.tflite"), num_threads=1)
             for kind, folder in (("float", "tflite"), ("int8", "tflite_int8"))}
    ids = {}  # the host's ids, computed before the timing

    def probabilities(kind):
        model = files[kind]
        order = [0 if "char_ids" in d["name"] else 1 for d in model.inputs]

        def run(token_lists):
            key = tuple(map(tuple, token_lists))
            if key not in ids:
                ids[key] = host_tagger_ids(os.path.join(out, "tflite"), token_lists)
            word_ids, char_ids = ids[key]
            return model(*[(char_ids, word_ids)[i] for i in order])[0]
        return run

    def tag(kind, batch):
        if kind == "float":  # any length in one call
            return lambda: [probabilities(kind)([tokens]) for tokens in batch]
        return lambda: [windowed(probabilities(kind), tokens, window) for tokens in batch]

    result = {"rows": rows, "window": window, "median_words": len(median)}
    for name, batch, repeats in (("median", [median], 30), ("64_words", [long], 30),
                                 ("200_sentences", sentences[:200], 5)):
        ms = _interleaved_ms({kind: tag(kind, batch) for kind in files}, repeats=repeats)
        result[f"{name}_ms_batch1"] = ms
        result[f"{name}_int8_over_float"] = ms["int8"] / ms["float"]
    return result


def sensor_classifier(train: int, epochs: int, test: int) -> dict:
    import keras
    from ai_edge_litert.interpreter import Interpreter

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
    import streaming as example

    from keras_seq.export import (
        convert_to_tflite,
        initial_streaming_states,
        streaming_calibration,
        streaming_model,
    )

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x_train, y_train = example.make_streams(train, 100, rng)
    x_test, y_test = example.make_streams(test, 100, rng)
    model = example.build_model()
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x_train, y_train, batch_size=64, epochs=epochs, verbose=0)
    keras_labels = np.asarray(model.predict(x_test, batch_size=256, verbose=0)).argmax(-1)
    stream = streaming_model(model)
    examples = streaming_calibration(stream, x_train[:20], max_examples=2000)
    files = {"float": convert_to_tflite(stream, batch_size=1),
             "int8": convert_to_tflite(stream, quantize="int8", representative_data=examples),
             "int16x8": convert_to_tflite(stream, quantize="int16x8",
                                          representative_data=examples)}
    names = [t.name for t in stream.inputs]
    result = {"keras_accuracy": float(np.mean(keras_labels == y_test)), "files_kb": {},
              "accuracy": {}, "agreement": {}}
    steps = {}
    for kind, flatbuffer in files.items():
        runner = Interpreter(model_content=flatbuffer, num_threads=1).get_signature_runner()
        labels = np.zeros_like(y_test)
        for row in range(test):
            states = initial_streaming_states(stream, 1)
            for t in range(x_test.shape[1]):
                named = runner(**dict(zip(names, [x_test[row:row + 1, t:t + 1], *states])))
                outputs = [named[f"output_{i}"] for i in range(len(named))]
                labels[row, t] = outputs[0][0, 0].argmax()
                states = outputs[1:]
        result["files_kb"][kind] = len(flatbuffer) / 1024
        result["accuracy"][kind] = float(np.mean(labels == y_test))
        result["agreement"][kind] = float(np.mean(labels == keras_labels))
        zero = [x_test[:1, :1], *initial_streaming_states(stream, 1)]
        steps[kind] = (lambda r=runner, z=zero: r(**dict(zip(names, z))))
    result["step_ms_batch1"] = _interleaved_ms(steps, repeats=300)
    result["over_float"] = {kind: ms / result["step_ms_batch1"]["float"]
                            for kind, ms in result["step_ms_batch1"].items()}
    return result


def fused_classifier(train: int, epochs: int, test: int) -> dict:
    import keras
    from ai_edge_litert.interpreter import Interpreter

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
    import streaming as example

    from keras_seq import layers
    from keras_seq.export import convert_to_tflite

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    length = 100
    x_train, y_train = example.make_streams(train, length, rng)
    x_test, y_test = example.make_streams(test, length, rng)
    inputs = keras.Input((None, example.CHANNELS), name="sensor")
    h = keras.layers.Dense(32, activation="relu")(inputs)
    h = layers.PeepholeLSTM(64, return_sequences=True)(h)
    h = layers.PeepholeLSTM(64, return_sequences=True)(h)
    model = keras.Model(inputs, keras.layers.Dense(2)(h))
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x_train, y_train, batch_size=64, epochs=epochs, verbose=0)
    keras_labels = np.asarray(model.predict(x_test, batch_size=256, verbose=0)).argmax(-1)
    calibration = [x_train[i:i + 1] for i in range(200)]
    t0 = time.perf_counter()
    files = {"float loop": convert_to_tflite(model, batch_size=1),
             "float fused": convert_to_tflite(model, fuse_lstm=True),
             "int8 fused": convert_to_tflite(model, quantize="int8", fuse_lstm=True,
                                             representative_data=calibration),
             "int8 loop": convert_to_tflite(model, quantize="int8",
                                            representative_data=calibration)}
    result = {"keras_accuracy": float(np.mean(keras_labels == y_test)),
              "convert_s": time.perf_counter() - t0, "files_kb": {}, "accuracy": {},
              "agreement": {}}
    streams = {}
    for kind, flatbuffer in files.items():
        runner = Interpreter(model_content=flatbuffer, num_threads=1).get_signature_runner()
        labels = np.stack([runner(sensor=x_test[row:row + 1])["output_0"][0].argmax(-1)
                           for row in range(test)])
        result["files_kb"][kind] = len(flatbuffer) / 1024
        result["accuracy"][kind] = float(np.mean(labels == y_test))
        result["agreement"][kind] = float(np.mean(labels == keras_labels))
        streams[kind] = (lambda r=runner: r(sensor=x_test[:1]))
    result["stream_ms_batch1"] = _interleaved_ms(streams, repeats=100)
    result["over_float_loop"] = {kind: ms / result["stream_ms_batch1"]["float loop"]
                                 for kind, ms in result["stream_ms_batch1"].items()}
    return result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--translator", help="a keras-seq train run folder")
    parser.add_argument("--lm", help="a keras-seq train --task lm run folder")
    parser.add_argument("--tagger", help="a keras-seq train --task tag run folder")
    parser.add_argument("--tagger-windows", type=int, nargs="+", default=[16],
                        help="the int8 tagger's windows to try (default: %(default)s)")
    parser.add_argument("--examples", type=int, default=500,
                        help="held-out examples that verify scores (default: %(default)s)")
    parser.add_argument("--sensor-train", type=int, default=3000)
    parser.add_argument("--sensor-epochs", type=int, default=6)
    parser.add_argument("--sensor-test", type=int, default=200)
    parser.add_argument("--fused-train", type=int, default=3000)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        if args.translator:
            results["translator"] = translator(args.translator, scratch, args.examples)
        if args.lm:
            results["lm"] = language_model(args.lm, scratch, args.examples)
        if args.tagger:
            results["tagger"] = [tagger(args.tagger, scratch, args.examples, window)
                                 for window in args.tagger_windows]
    if args.sensor_train:
        results["sensor"] = sensor_classifier(args.sensor_train, args.sensor_epochs,
                                              args.sensor_test)
    if args.fused_train:
        results["fused"] = fused_classifier(args.fused_train, args.sensor_epochs,
                                            args.sensor_test)
    print(json.dumps(results, indent=1, default=str))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return results


if __name__ == "__main__":
    main()
