"""The integer files of ``keras-seq export`` in TensorFlow Lite for Microcontrollers.

For each export folder given (``keras-seq export RUN --quantize int8
int16x8``), every integer TFLite artifact is checked the way ``keras-seq
verify`` checks it (the verify worker's own check, in this process), once
in LiteRT and once in TensorFlow Lite for Microcontrollers (TFLM, the
``tflite-micro`` interpreter), which microcontrollers run. Reported per
artifact and runtime: whether it runs (else the op TFLM refuses), the
quality verify measures (exact match, accuracy, next-token agreement, their
agreement with Keras), and the largest logit error against Keras.
TFLM's kernels are its portable reference kernels, so its times on this
x86 CPU say nothing about a microcontroller's and are not reported.

    python benchmarks/micro_runtime.py runs/dates/export runs/lm/export --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys

import numpy as np


class MicroInterpreter:
    """TFLM behind the part of LiteRT's ``Interpreter`` that verify uses
    (details by tensor index, static shapes)."""

    def __init__(self, model_path, num_threads=None):
        from ai_edge_litert import schema_py_generated as schema
        from tflite_micro.python.tflite_micro import runtime

        with open(model_path, "rb") as f:
            flatbuffer = f.read()
        self._litert = _LITERT(model_path=model_path)  # the details, in LiteRT's words
        graph = schema.Model.GetRootAs(flatbuffer, 0).Subgraphs(0)
        self._in = {int(graph.Inputs(i)): i for i in range(graph.InputsLength())}
        self._out = {int(graph.Outputs(i)): i for i in range(graph.OutputsLength())}
        self._micro = runtime.Interpreter.from_bytes(flatbuffer)

    def get_input_details(self):
        return self._litert.get_input_details()

    def get_output_details(self):
        return self._litert.get_output_details()

    def resize_tensor_input(self, index, shape, strict=False):
        fixed = [d for d in self.get_input_details() if d["index"] == index][0]["shape"]
        if tuple(shape) != tuple(fixed):
            raise ValueError(f"TFLM runs static shapes: {tuple(shape)} for {tuple(fixed)}")

    def allocate_tensors(self):
        pass

    def set_tensor(self, index, value):
        self._micro.set_input(value, self._in[index])

    def invoke(self):
        self._micro.invoke()

    def get_tensor(self, index):
        return self._micro.get_output(self._out[index])


_LITERT = None


def _worker():
    finders = list(sys.meta_path)
    try:  # the verify worker, without its block on keras_seq imports
        import keras_seq.export._verify_worker as worker
    finally:
        sys.meta_path[:] = finders
    return worker


@contextlib.contextmanager
def _runtime(name):
    """LiteRT's Interpreter, or TFLM standing in for it."""
    global _LITERT
    import ai_edge_litert.interpreter as litert

    _LITERT = original = litert.Interpreter
    if name == "tflm":
        litert.Interpreter = MicroInterpreter
    try:
        yield
    finally:
        litert.Interpreter = original


_QUALITY = ("exact_match", "string_match", "token_agreement", "accuracy", "keras_agreement",
            "agreement_with_keras", "label_agreement", "tag_accuracy", "max_abs_logit_error")


def check_folder(out_dir: str) -> list[dict]:
    worker = _worker()
    with open(os.path.join(out_dir, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    reference = dict(np.load(os.path.join(out_dir, manifest["reference"])))
    kind = manifest.get("check") or worker._CHECK_OF_TASK.get(manifest.get("task"),
                                                              "translation")
    rows = []
    for entry in manifest["artifacts"]:
        if entry["format"] != "tflite" or not any(
                q in entry["artifact"] for q in ("int8", "int16x8")):
            continue
        row = {"folder": out_dir, "artifact": entry["artifact"]}
        for runtime in ("litert", "tflm"):
            said = io.StringIO()
            try:
                with _runtime(runtime), contextlib.redirect_stderr(said):
                    record = worker.CHECKS[kind](out_dir, entry, reference)
                row[runtime] = {k: record[k] for k in _QUALITY if record.get(k) is not None}
            except Exception as error:  # TFLM refusing an op: its words
                row[runtime] = {"refused": f"{error}"[:200]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", help="keras-seq export folders")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    rows = [row for folder in args.folders for row in check_folder(folder)]
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
