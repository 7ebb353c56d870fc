"""Where onnxruntime's time goes in a language model's one-token step (not a test).

For one ``keras-seq train --task lm`` run (the weights do not matter), in one
process, each runtime on one thread, batch 1:

- milliseconds per call of ``lm_step.tflite`` (LiteRT's ``invoke`` alone),
  ``step.onnx`` (the same generation step through tf2onnx, no ``If``, no
  ``Loop``) and ``lm_stream.onnx`` as `keras-seq export` writes it, fed one
  token;
- onnxruntime's floor: a graph of 1, 100 and 200 ``Add``/``Mul`` nodes on a
  (1, 128) tensor, and an ``If`` next to the graph it chooses from (100
  MatMuls of 64×64: in the main graph, behind an ``If`` that takes an
  identity branch, and inside the ``If``'s branch);
- the node count of each ONNX file after onnxruntime's own fusions, by op.

Repetitions interleaved, medians.

    keras-seq train --task lm --model mingru --epochs 1 --steps-per-epoch 10 --name mingru
    python benchmarks/onnx_step_cost.py --run runs/mingru --json onnx_step_cost.json
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import statistics
import tempfile
import time

import numpy as np


def _session(model, optimized_path=None, optimize=True):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    if not optimize:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    if optimized_path:
        options.optimized_model_filepath = optimized_path
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _one_token_feed(session):
    feed = {}
    for spec in session.get_inputs():
        if "int" in spec.type:
            feed[spec.name] = np.full([1] * len(spec.shape), 5, np.int32)
        else:
            feed[spec.name] = np.zeros([d if isinstance(d, int) else 1 for d in spec.shape],
                                       np.float32)
    return feed


def _op_counts(path) -> dict:
    import onnx

    counts = collections.Counter()

    def walk(graph):
        for node in graph.node:
            counts[node.op_type] += 1
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    walk(attribute.g)

    walk(onnx.load(path).graph)
    return dict(counts.most_common())


def _synthetic_graphs() -> dict:
    """Serialized models: elementwise chains and the ``If`` comparison."""
    from onnx import TensorProto, helper, numpy_helper

    def model(nodes, inputs, outputs, initializers=()):
        graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    def chain(length):
        nodes, current = [], "x"
        for i in range(length):
            nodes.append(helper.make_node(("Add", "Mul")[i % 2], [current, "x"], [f"y{i}"]))
            current = f"y{i}"
        nodes.append(helper.make_node("Identity", [current], ["out"]))
        return model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 128])],
                     [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["b", 128])])

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.random((64, 64), np.float32), f"w{i}")
               for i in range(100)]

    def matmuls(prefix, start):
        nodes, current = [], start
        for i in range(100):
            nodes.append(helper.make_node("MatMul", [current, f"w{i}"], [f"{prefix}{i}"]))
            current = f"{prefix}{i}"
        return nodes, current

    def branch(nodes, result, name):
        out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, None)
        return helper.make_graph(nodes + [helper.make_node("Identity", [result], [out.name])],
                                 name, [], [out])

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])
    condition = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])
    main, main_out = matmuls("a", "x")
    plain = model(main + [helper.make_node("Identity", [main_out], ["y"])], [x, condition], [y],
                  weights)
    inside, inside_out = matmuls("t", main_out)
    identity_if = model(main + [helper.make_node(
        "If", ["c"], ["y"], then_branch=branch(inside, inside_out, "then"),
        else_branch=branch([], main_out, "else"))], [x, condition], [y], weights)
    in_branch, in_branch_out = matmuls("e", "x")
    working_if = model([helper.make_node(
        "If", ["c"], ["y"], then_branch=branch([], "x", "then"),
        else_branch=branch(in_branch, in_branch_out, "else"))], [x, condition], [y], weights)
    return {"chain 1": chain(1), "chain 100": chain(100), "chain 200": chain(200),
            "100 MatMuls": plain, "100 MatMuls, then an identity If": identity_if,
            "100 MatMuls inside an If": working_if}


def measure(run_dir: str, repetitions: int, calls: int) -> dict:
    from ai_edge_litert.interpreter import Interpreter

    from keras_seq.export._tracing import language_model_step_function
    from keras_seq.export.language_model_export import language_model_stream_function
    from keras_seq.export.onnx_export import convert_to_onnx
    from keras_seq.export.tflite_export import convert_language_model_step_to_tflite
    from keras_seq.run_folder import read_run

    run = read_run(run_dir, "onnx_step_cost")
    model = run.load_model(compile=False)
    context = int(run.config["context"])
    folder = tempfile.mkdtemp(prefix="onnx_step_cost-")
    paths = {name: os.path.join(folder, name)
             for name in ("lm_step.tflite", "step.onnx", "lm_stream.onnx")}
    with open(paths["lm_step.tflite"], "wb") as f:
        f.write(convert_language_model_step_to_tflite(model, context))
    step, signature, _ = language_model_step_function("onnx_step_cost", model, context)
    convert_to_onnx(step, paths["step.onnx"], signature)
    stream, signature = language_model_stream_function(model)
    convert_to_onnx(stream, paths["lm_stream.onnx"], signature)

    interpreter = Interpreter(model_path=paths["lm_step.tflite"], num_threads=1)
    interpreter.allocate_tensors()
    for spec in interpreter.get_input_details():
        interpreter.set_tensor(spec["index"], np.zeros(spec["shape"], spec["dtype"]))
    runs = {"lm_step.tflite invoke": interpreter.invoke}
    nodes = {"lm_step.tflite": len(interpreter._get_ops_details())}
    for name in ("step.onnx", "lm_stream.onnx"):
        optimized = paths[name].replace(".onnx", ".optimized.onnx")
        session = _session(paths[name], optimized)
        nodes[name] = _op_counts(optimized)
        runs[name] = functools.partial(session.run, None, _one_token_feed(session))
    x = {"x": np.ones((1, 128), np.float32)}
    matmul_feed = {"x": np.ones((1, 64), np.float32), "c": np.array(False)}
    for name, synthetic in _synthetic_graphs().items():
        session = _session(synthetic.SerializeToString(), optimize=False)
        feed = x if name.startswith("chain") else matmul_feed
        runs[name] = functools.partial(session.run, None, feed)

    for function in runs.values():
        for _ in range(50):
            function()  # warm up
    samples = {name: [] for name in runs}
    for repetition in range(repetitions):
        names = list(runs)
        for name in names[repetition % len(names):] + names[:repetition % len(names)]:
            start = time.perf_counter()
            for _ in range(calls):
                runs[name]()
            samples[name].append((time.perf_counter() - start) / calls)
    ms = {name: round(1000 * statistics.median(v), 4) for name, v in samples.items()}
    return {
        "run": os.path.basename(os.path.normpath(run_dir)),
        "ms_per_call": ms,
        "us_per_elementwise_node": round(1000 * (ms["chain 200"] - ms["chain 100"]) / 100, 3),
        "node_count": {name: (v if isinstance(v, int) else sum(v.values()))
                       for name, v in nodes.items()},
        "nodes_by_op": {name: v for name, v in nodes.items() if isinstance(v, dict)},
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a keras-seq train --task lm run")
    parser.add_argument("--repetitions", type=int, default=11)
    parser.add_argument("--calls", type=int, default=300, help="calls per timed repetition")
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()
    row = measure(args.run, args.repetitions, args.calls)
    print(json.dumps(row, indent=1), flush=True)
    if args.json:
        with open(args.json, "x", encoding="utf-8") as f:
            json.dump(row, f, indent=1)


if __name__ == "__main__":
    main()
