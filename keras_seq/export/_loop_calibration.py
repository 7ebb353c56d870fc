"""Calibration of a float TFLite model that keeps its loops (``WHILE`` ops).

TensorFlow's calibrator crashes the process on a ``WHILE`` (a segmentation
fault, with or without TensorFlow's list ops in the body); its MLIR
quantizer quantizes one given the ranges. `calibrated` records them itself,
in LiteRT: every float tensor's minimum and maximum over the examples, as
TensorFlow's calibrator does, written into the tensors where the quantizer
reads them. The main graph's tensors are read after each run. A loop
body's tensors hold only the last iteration's values after a run, so each
loop runs again on its own: its condition and its body, each made the main
graph of a model of its own (the same tensors), run one iteration at a
time from the values the whole model gave the loop, each iteration's
tensors read as it ends.

Runs in the child process of `keras_seq.export.integer_tflite`.
"""

from __future__ import annotations

import warnings

import numpy as np

from keras_seq.export._flatbuffer import (
    code_of,
    load_model,
    pack_model,
    schema_module,
)


def flatbuffer_has_loops(flatbuffer: bytes) -> bool:
    """Whether the model's main graph has a ``WHILE``."""
    model_t = load_model(flatbuffer)
    return bool(_loops(model_t))


def calibrated(flatbuffer: bytes, examples: list[list[np.ndarray]]) -> bytes:
    """``flatbuffer`` with each float activation's range over ``examples``
    (lists of input arrays, in the model's input order) in its quantization
    parameters' ``min`` and ``max``."""
    from ai_edge_litert.interpreter import Interpreter

    schema = schema_module()
    model_t = load_model(flatbuffer)
    loops = _loops(model_t)
    for _, cond, body in loops:
        for subgraph in (model_t.subgraphs[cond], model_t.subgraphs[body]):
            if _loops(model_t, subgraph):
                raise ValueError("a loop inside another loop's step (a recurrent layer run "
                                 "inside another's step) is not calibrated; the int8 "
                                 "loops take one level")
    ranges: dict[tuple[int, int], list[float]] = {}

    def record(interpreter, read: int, index: int) -> None:
        """Subgraph ``read`` of ``interpreter`` is the model's subgraph ``index``."""
        subgraph = model_t.subgraphs[index]
        for t, tensor in enumerate(subgraph.tensors):
            if tensor.type != schema.TensorType.FLOAT32 or _constant(model_t, tensor):
                continue
            try:
                value = interpreter.get_tensor(t, read)
            except ValueError:  # no data: a value nothing computed (an unread loop output)
                continue
            if value.size == 0:
                continue
            low, high = float(value.min()), float(value.max())
            seen = ranges.setdefault((index, t), [low, high])
            seen[0], seen[1] = min(seen[0], low), max(seen[1], high)

    whole = _interpreter(Interpreter, flatbuffer)
    alone = [(_interpreter(Interpreter, _alone(flatbuffer, cond)),
              _interpreter(Interpreter, _alone(flatbuffer, body))) for _, cond, body in loops]
    for example in examples:
        _run(whole, example)
        record(whole, 0, 0)
        for (op, _, body), (condition, step) in zip(loops, alone):
            # The loop again, one iteration per run of its body alone, from
            # the values the whole model gave it.
            carried = [whole.get_tensor(int(i)) for i in op.inputs]
            outputs = [int(o) for o in model_t.subgraphs[body].outputs]
            while True:
                _run(condition, carried)
                if not bool(condition.get_tensor(condition.get_output_details()[0]["index"])):
                    break
                _run(step, carried)
                record(step, 0, body)
                carried = [step.get_tensor(o) for o in outputs]
    for _, cond, body in loops:
        # The condition reads what the body reads: the same ranges.
        for into_cond, into_body in zip(model_t.subgraphs[cond].inputs,
                                        model_t.subgraphs[body].inputs):
            if (body, int(into_body)) in ranges:
                ranges[(cond, int(into_cond))] = ranges[(body, int(into_body))]
    for (index, t), (low, high) in ranges.items():
        tensor = model_t.subgraphs[index].tensors[t]
        quantization = tensor.quantization or schema.QuantizationParametersT()
        quantization.min, quantization.max = [low], [high]
        tensor.quantization = quantization
    return pack_model(model_t)


def _loops(model_t, subgraph=None) -> list:
    """``(op, cond index, body index)`` of each ``WHILE`` of ``subgraph``
    (the main graph by default)."""
    subgraph = subgraph if subgraph is not None else model_t.subgraphs[0]
    loop = schema_module().BuiltinOperator.WHILE
    return [(op, op.builtinOptions.condSubgraphIndex, op.builtinOptions.bodySubgraphIndex)
            for op in subgraph.operators if code_of(model_t, op) == loop]


def _constant(model_t, tensor) -> bool:
    data = model_t.buffers[tensor.buffer].data
    return data is not None and len(data) > 0


def _alone(flatbuffer: bytes, index: int) -> bytes:
    """The model whose main graph is subgraph ``index`` (a loop's condition
    or body: its inputs the values the loop carries), tensor for tensor."""
    model_t = load_model(flatbuffer)
    model_t.subgraphs = [model_t.subgraphs[index]]
    model_t.signatureDefs = []
    return pack_model(model_t)


def _interpreter(interpreter_class, flatbuffer: bytes):
    """An interpreter that keeps every tensor's last value (LiteRT warns
    that this is for debugging: it is what calibrating reads), without
    delegates, whose fused ops would not."""
    from ai_edge_litert.interpreter import OpResolverType

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        interpreter = interpreter_class(
            model_content=flatbuffer, experimental_preserve_all_tensors=True,
            experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interpreter.allocate_tensors()
    return interpreter


def _run(interpreter, example: list[np.ndarray]) -> None:
    details = interpreter.get_input_details()
    if any(tuple(d["shape"]) != a.shape for d, a in zip(details, example)):
        for d, a in zip(details, example):
            interpreter.resize_tensor_input(d["index"], a.shape)
        interpreter.allocate_tensors()
    for d, a in zip(interpreter.get_input_details(), example):
        interpreter.set_tensor(d["index"], a)
    interpreter.invoke()
