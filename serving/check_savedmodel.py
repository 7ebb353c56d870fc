"""Serve a request with an exported SavedModel using TensorFlow alone.

This is what TF Serving does with the model: load the SavedModel, look up the
signature named in the request and run it on the request's instances. Run as a
script it cannot import keras_seq, so it also proves that the SavedModel is
self-contained. tensorflow-text is imported only when the graph holds its ops
(a WordPiece tokenizer).

Usage:

    python serving/check_savedmodel.py exported/translator/1 [--request serving/request.json]

Prints the signature, the ops a server must provide, and the response in the
REST API's row format: {"predictions": [{"outputs": ..., "output_ids": [...]}, ...]}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if __name__ == "__main__":
    # Run as a script, the check proves the model does not need keras_seq.
    sys.modules["keras_seq"] = None  # type: ignore[assignment]

import tensorflow as tf  # noqa: E402
from tensorflow.core.protobuf import saved_model_pb2  # noqa: E402

# Ops that tensorflow-text registers and a WordPiece tokenizer uses.
_TEXT_OPS = {"FastBertNormalize", "FastWordpieceTokenizeWithOffsets", "RegexSplitWithOffsets"}
_HERE = os.path.dirname(os.path.abspath(__file__))


def _op_names(directory: str) -> set[str]:
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(directory, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    names = set()
    for meta_graph in saved_model.meta_graphs:
        names.update(node.op for node in meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            names.update(node.op for node in function.node_def)
    return names


def _jsonable(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if hasattr(value, "tolist"):
        return _jsonable(value.tolist())
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("saved_model", help="a SavedModel folder (a version folder such as .../1)")
    parser.add_argument("--request", default=os.path.join(_HERE, "request.json"))
    args = parser.parse_args(argv)

    ops = _op_names(args.saved_model)
    text_ops = sorted(ops & _TEXT_OPS)
    xla_ops = sorted(op for op in ops if op.startswith("Xla"))
    print(f"ops: {len(ops)}; tensorflow-text ops: {text_ops or 'none'}; XLA ops: {xla_ops or 'none'}")
    if text_ops:
        import tensorflow_text  # noqa: F401  (registers the ops, as TF Serving's binary does)
    if xla_ops:
        print("note: TF Serving on CPU needs --xla_cpu_compilation_enabled=true for XLA ops")

    with open(args.request, encoding="utf-8") as f:
        request = json.load(f)
    name = request.get("signature_name", "serving_default")
    signature = tf.saved_model.load(args.saved_model).signatures[name]
    print(f"signature {name!r}:")
    print(f"  inputs:  {signature.structured_input_signature[1]}")
    print(f"  outputs: {signature.structured_outputs}")

    if "instances" in request:
        inputs = tf.constant(request["instances"], tf.string)
    else:  # the columnar format: {"inputs": [...]} or {"inputs": {"inputs": [...]}}
        columns = request["inputs"]
        inputs = tf.constant(columns["inputs"] if isinstance(columns, dict) else columns, tf.string)
    outputs = {k: v.numpy() for k, v in signature(inputs=inputs).items()}
    rows = [
        {k: _jsonable(v[i]) for k, v in sorted(outputs.items())} for i in range(len(inputs))
    ]
    print(json.dumps({"predictions": rows}, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
