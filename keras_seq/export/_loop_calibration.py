"""Calibration of a float TFLite model that keeps its loops (``WHILE`` ops).

TensorFlow's calibrator crashes the process on a ``WHILE`` (a segmentation
fault, with or without TensorFlow's list ops in the body); its MLIR
quantizer quantizes one given the ranges. `calibrated` records them itself,
in LiteRT: every float tensor's minimum and maximum over the examples, as
TensorFlow's calibrator does, written into the tensors where the quantizer
reads them. The main graph's tensors are read after each run. A loop
body's tensors hold only the last iteration's values after a run, so each
iteration ``k`` of each loop is read from a copy of the model whose loop
stops after ``k`` iterations (its condition also asks ``counter < k``; the
counter is the first value the loop carries, as TensorFlow writes its
loops), the other loops running whole: ``T`` copies of a model with one
loop of ``T`` steps, each run on every example.

Runs in the child process of `keras_seq.export.integer_tflite`.
"""

from __future__ import annotations

import warnings

import numpy as np

from keras_seq.export._flatbuffer import (
    code_of,
    load_model,
    new_operator,
    pack_model,
    schema_module,
)


def has_loops(flatbuffer: bytes) -> bool:
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
                raise ValueError("a loop inside a loop is not calibrated here")
    ranges: dict[tuple[int, int], list[float]] = {}

    def record(interpreter, index: int) -> None:
        subgraph = model_t.subgraphs[index]
        for t, tensor in enumerate(subgraph.tensors):
            if tensor.type != schema.TensorType.FLOAT32 or _constant(model_t, tensor):
                continue
            try:
                value = interpreter.get_tensor(t, index)
            except ValueError:  # no data: a value nothing computed (an unread loop output)
                continue
            if value.size == 0:
                continue
            low, high = float(value.min()), float(value.max())
            seen = ranges.setdefault((index, t), [low, high])
            seen[0], seen[1] = min(seen[0], low), max(seen[1], high)

    whole = _interpreter(Interpreter, flatbuffer)
    iterations = [0] * len(loops)
    for example in examples:
        _run(whole, example)
        record(whole, 0)
        for n, (op, _, _) in enumerate(loops):
            iterations[n] = max(iterations[n], int(whole.get_tensor(int(op.outputs[0]))))
    for n, (_, cond, body) in enumerate(loops):
        for k in range(1, iterations[n] + 1):
            stopped = _interpreter(Interpreter, _stopping_after(flatbuffer, n, k))
            for example in examples:
                _run(stopped, example)
                record(stopped, body)
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


def _stopping_after(flatbuffer: bytes, n: int, k: int) -> bytes:
    """The model with its ``n``-th loop's condition also asking ``counter < k``."""
    schema = schema_module()
    model_t = load_model(flatbuffer)
    _, cond_index, _ = _loops(model_t)[n]
    cond = model_t.subgraphs[cond_index]
    limit = _tensor(model_t, cond, schema.TensorType.INT32, np.array(k, np.int32))
    below = _tensor(model_t, cond, schema.TensorType.BOOL)
    both = _tensor(model_t, cond, schema.TensorType.BOOL)
    cond.operators += [
        new_operator(model_t, schema.BuiltinOperator.LESS, [int(cond.inputs[0]), limit], [below]),
        new_operator(model_t, schema.BuiltinOperator.LOGICAL_AND, [int(cond.outputs[0]), below],
                  [both]),
    ]
    cond.outputs = np.array([both], np.int32)
    return pack_model(model_t)


def _tensor(model_t, subgraph, kind: int, value: np.ndarray | None = None) -> int:
    schema = schema_module()
    tensor = schema.TensorT()
    tensor.shape = np.array([], np.int32)
    tensor.type = kind
    tensor.buffer = 0
    if value is not None:
        buffer = schema.BufferT()
        buffer.data = np.frombuffer(value.tobytes(), np.uint8)
        model_t.buffers.append(buffer)
        tensor.buffer = len(model_t.buffers) - 1
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1


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
