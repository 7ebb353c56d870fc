"""Integer-only TFLite: ``quantize="int8"`` and ``quantize="int16x8"``.

Every op of an integer model runs an integer kernel: weights int8,
activations int8 (``"int8"``) or int16 (``"int16x8"``, TFLite's 16x8 mode),
with a QUANTIZE at each float input and a DEQUANTIZE at each float output.
The activations' scales come from calibration: the converter runs the float
model over a few examples of real inputs (``representative_data``), as in
TensorFlow's post-training integer quantization guide.

TensorFlow's calibrator crashes the process (a segmentation fault) on a
graph with a loop, which every recurrent layer over a sequence traces to,
Keras' own included; and LiteRT can abort while preparing a 16x8 model
its quantizer got wrong. So:

- int8 keeps the loops (`keras_seq.export._lowering.BuiltinLoops` with
  ``integer_loops``: one step per iteration, written with a
  ``DYNAMIC_UPDATE_SLICE``): the float file is calibrated step by step
  (`keras_seq.export._loop_calibration`), quantized by TensorFlow's MLIR
  quantizer, and the values the loops carry made integer
  (`keras_seq.export._integer_mends.integer_loop_carries`).
- 16x8's graph is traced without loops: every loop of a static length runs
  unrolled (`keras_seq.export._lowering.BuiltinLoops` with
  ``integer``). Either way the time length is taken from the signature or,
  for the default one, from the calibration examples. A step model from
  `keras_seq.export.streaming_model`, fed one step at a time, has no loop
  at all; a dynamic length left in the graph is refused with one line.
  With ``fuse_lstm=True`` each LSTM is TFLite's fused op, which has no
  loop either: `quantize_flatbuffer` takes the float fused file to the
  op's integer kernel, over any length (int8), or to TensorFlow Lite for
  Microcontrollers' 16x8 kernel over a static one (a plain LSTM).
- 16x8 runs TensorFlow's 16x8 quantizer on the float file, and mends what
  it gets wrong (`keras_seq.export._integer_mends.prepared_for_16x8` before,
  ``int16_sums`` and ``integer_only`` after): token ids take 16x8 too.
- the quantizer runs in a child process (`keras_seq.export._integer_worker`),
  which also loads and runs the integer model once in LiteRT (a 16x8 fused
  LSTM: in TensorFlow Lite for Microcontrollers). A crash there
  is one `ValueError` line here, never the caller's process going down.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import tempfile
import warnings
from collections.abc import Iterable

import numpy as np
import tensorflow as tf

from keras_seq._unused_imports import python_command
from keras_seq._validation import ArgumentTypeError, ArgumentValueError, check_bool
from keras_seq.export._flatbuffer import compacted, inputs_outputs_in_call_order

INTEGER_QUANTIZATIONS = ("int8", "int16x8")

# The quantizer's child process: TensorFlow's import, calibration and
# conversion of an unrolled model take seconds to a minute on a CPU.
_WORKER_TIMEOUT_S = 900

# What the child leaves behind in its folder.
_FLATBUFFER, _FAILURE, _CONVERTED = "model.tflite", "failure.txt", "converted"
# A float flatbuffer for the child to quantize (else it converts the SavedModel).
_FLOAT_FLATBUFFER = "float.tflite"

_LOOP_OPS = {"While", "StatelessWhile"}


def is_integer(quantize) -> bool:
    return quantize in INTEGER_QUANTIZATIONS


def check_integer_arguments(where: str, quantize, representative_data,
                            integer_io) -> tuple[bool, bool]:
    """Whether ``quantize`` (already checked) is an integer mode, and
    ``integer_io`` as a bool; an error for ``representative_data`` or
    ``integer_io`` given without an integer mode."""
    integer = is_integer(quantize)
    integer_io = check_bool(where, "integer_io", integer_io)
    if integer_io and not integer:
        raise ArgumentValueError(where, f'`integer_io=True` needs quantize="int8" or '
                                 f'"int16x8"; received quantize={quantize!r}.')
    if representative_data is not None and not integer:
        raise ArgumentValueError(where, f"`representative_data` calibrates integer models "
                                 f'(quantize="int8" or "int16x8"); received quantize='
                                 f"{quantize!r}.")
    return integer, integer_io


def require_micro(where: str) -> None:
    """16x8 fused LSTM ops run in TFLite Micro's kernel alone (LiteRT has
    no 16x8 LSTM kernel), whose interpreter checks the file: its package
    must be there (an `ImportError` before any conversion)."""
    if importlib.util.find_spec("tflite_micro") is None:
        raise ImportError(
            f'{where}: quantize="int16x8" with fuse_lstm=True writes TensorFlow Lite for '
            "Microcontrollers' 16x8 LSTM kernel (LiteRT has none), whose interpreter checks "
            'the file: pip install tflite-micro (keras-seq\'s "[micro]" extra).')


def check_fused_16x8(where: str, layers) -> None:
    """TFLite Micro's 16x8 LSTM kernel computes a plain LSTM: peepholes and
    CIFG are refused, naming the layer."""
    for layer in layers:
        if layer.peepholes or layer.cifg:
            what = "peepholes" if layer.peepholes else "a coupled input-forget gate (CIFG)"
            raise ArgumentValueError(
                where, f'quantize="int16x8" with fuse_lstm=True: {layer.name} has {what}, '
                "and the one 16x8 LSTM kernel there is, TensorFlow Lite for "
                "Microcontrollers' (LiteRT has none), computes a plain LSTM; use "
                'quantize="int8" (fused), or fuse_lstm=False (the loops unrolled in 16x8).')


def calibration_examples(where: str, representative_data, specs) -> list[list[np.ndarray]]:
    """The examples of ``representative_data`` as lists of arrays in ``specs`` order.

    ``representative_data`` is a callable returning an iterable (TensorFlow's
    ``representative_dataset``) or an iterable. Each example is one array (a
    model of one input), a list or tuple in input order, or a dict keyed by
    input name; each array holds a batch the signature accepts.
    """
    if representative_data is None:
        raise ArgumentValueError(
            where, "integer quantization calibrates the activations on real inputs: give "
            "`representative_data`, a few hundred examples of the model's inputs "
            "(an iterable, or a callable returning one).")
    if callable(representative_data):
        representative_data = representative_data()
    if isinstance(representative_data, (str, bytes, dict)) or not isinstance(
            representative_data, Iterable):
        raise ArgumentTypeError(where, f"`representative_data` must be an iterable of examples "
                                f"(or a callable returning one); received "
                                f"{type(representative_data).__name__}.")
    names = [spec.name for spec in specs]
    examples = []
    for n, example in enumerate(representative_data):
        if isinstance(example, dict):
            missing = [name for name in names if name not in example]
            if missing:
                raise ArgumentValueError(where, f"`representative_data` example {n} has no "
                                         f"input {missing[0]!r} (inputs: {names}).")
            example = [example[name] for name in names]
        elif not isinstance(example, (list, tuple)):
            example = [example]
        if len(example) != len(specs):
            raise ArgumentValueError(where, f"`representative_data` example {n} has "
                                     f"{len(example)} arrays; the model takes {len(specs)} "
                                     f"inputs ({names}).")
        arrays = []
        for name, spec, value in zip(names, specs, example):
            array = np.asarray(value)
            if not spec.shape.is_compatible_with(array.shape):
                raise ArgumentValueError(where, f"`representative_data` example {n}: input "
                                         f"{name!r} has shape {array.shape}; expected "
                                         f"{tuple(spec.shape)} (None: any size).")
            if spec.dtype.is_floating:
                if not np.issubdtype(array.dtype, np.number) or not np.all(np.isfinite(array)):
                    raise ArgumentValueError(where, f"`representative_data` example {n}: input "
                                             f"{name!r} must hold finite numbers.")
            arrays.append(array.astype(spec.dtype.as_numpy_dtype))
        examples.append(arrays)
    if not examples:
        raise ArgumentValueError(where, "`representative_data` holds no examples.")
    floating = [i for i, spec in enumerate(specs) if spec.dtype.is_floating]
    constant = {i: {float(v) for example in examples for v in np.unique(example[i])[:2]}
                for i in floating}
    if floating and all(len(values) < 2 for values in constant.values()):
        name = names[floating[0]]
        raise ArgumentValueError(where, f"every `representative_data` value of input "
                                 f"{name!r} is {constant[floating[0]].pop()}; the examples set "
                                 "the ranges of the integer activations: give real inputs.")
    return examples


def static_specs(where: str, specs, examples) -> list[tf.TensorSpec]:
    """``specs`` with each dynamic dimension set to the examples' size there.

    Integer models have no loops, so every length is static: the examples
    must agree on each dimension the signature leaves open.
    """
    fixed = []
    for i, spec in enumerate(specs):
        shape = list(spec.shape)
        for axis, size in enumerate(shape):
            if size is not None:
                continue
            sizes = sorted({example[i].shape[axis] for example in examples})
            if len(sizes) > 1:
                what = "batch" if axis == 0 else f"axis {axis}"
                raise ArgumentValueError(
                    where, f"the `representative_data` examples of input {spec.name!r} differ "
                    f"in {what} ({sizes[0]} to {sizes[-1]}); an integer model has static "
                    "shapes with its loops unrolled: pad the examples to one length, or "
                    "give an `input_signature` with static shapes.")
            shape[axis] = sizes[0]
        fixed.append(tf.TensorSpec(shape, spec.dtype, name=spec.name))
    return fixed


def has_loops(concrete) -> bool:
    """Whether the traced graph has a loop."""
    return bool(_loops_of(concrete))


def _loops_of(concrete) -> list[str]:
    graph = concrete.graph.as_graph_def()
    nodes = [*graph.node, *(n for f in graph.library.function for n in f.node_def)]
    return [node.name for node in nodes if node.op in _LOOP_OPS]


def refuse_loops(where: str, concrete, quantize: str) -> None:
    """A clear error for a traced graph that still has a loop (a dynamic
    length): TensorFlow's quantizer crashes on one."""
    loops = _loops_of(concrete)
    if loops:
        raise ArgumentValueError(
            where, f'quantize="{quantize}" needs a graph without loops, and this one has '
            f"{len(loops)} over a dynamic length (TensorFlow's quantizer crashes on them): "
            "give an `input_signature` with a static time length (the loops then run "
            "unrolled), or convert keras_seq.export.streaming_model(model) one step at "
            "a time.")


def convert_integer(where: str, concrete, input_names: list[str], quantize: str,
                    examples: list[list[np.ndarray]], trackable=None,
                    integer_io: bool = False) -> bytes:
    """The integer-only flatbuffer of ``concrete``, quantized in a child process.

    ``concrete``'s variables are held by ``trackable`` (or a module made
    for them) in the SavedModel the child converts; its signature keeps the
    spec names ``input_names`` and the outputs ``output_0`` … in call order.
    """
    refuse_loops(where, concrete, quantize)
    module = trackable if trackable is not None else tf.Module()
    if trackable is None:
        module.captured = list(concrete.variables)
    with tempfile.TemporaryDirectory(prefix="keras_seq_int_") as folder:
        tf.saved_model.save(module, os.path.join(folder, "model"),
                            signatures={"serving_default": concrete})
        flatbuffer = _quantized_in_child(where, folder, input_names, quantize, examples,
                                         integer_io)
    return compacted(inputs_outputs_in_call_order(flatbuffer, input_names))


def quantize_flatbuffer(where: str, flatbuffer: bytes, input_names: list[str], quantize: str,
                        examples: list[list[np.ndarray]], integer_io: bool = False) -> bytes:
    """The integer-only flatbuffer of a float one (builtin ops: the fused
    LSTM route, and int8 loops), calibrated and quantized in a child
    process.

    TensorFlow's MLIR quantizer takes TFLite's fused LSTM op (peepholes and
    CIFG included) to its integer kernel: int8 weights and activations,
    int16 peepholes and cell state, with the gate scales the calibration
    records on the op's intermediate tensors; in 16x8 (a plain LSTM, static
    shapes), int16 activations and cell state, int8 weights and int64
    biases, the kernel of TensorFlow Lite for Microcontrollers, where the
    child runs it once (LiteRT has no 16x8 LSTM kernel). A ``WHILE`` loop
    (of a static length, int8) is calibrated by
    `keras_seq.export._loop_calibration`, where TensorFlow's calibrator
    crashes, and its carried values made integer
    (`keras_seq.export._integer_mends.integer_loop_carries`).
    """
    with tempfile.TemporaryDirectory(prefix="keras_seq_int_") as folder:
        with open(os.path.join(folder, _FLOAT_FLATBUFFER), "wb") as f:
            f.write(flatbuffer)
        quantized = _quantized_in_child(where, folder, input_names, quantize, examples,
                                        integer_io)
    return compacted(quantized)


def _quantized_in_child(where: str, folder: str, input_names: list[str], quantize: str,
                        examples: list[list[np.ndarray]], integer_io: bool) -> bytes:
    """Runs the child on ``folder`` (the float model already there) and warns
    of the ops it left in float."""
    np.savez(os.path.join(folder, "examples.npz"),
             **{f"{n}_{i}": a for n, example in enumerate(examples)
                for i, a in enumerate(example)})
    with open(os.path.join(folder, "inputs.txt"), "w") as f:
        f.write("\n".join(input_names))
    flatbuffer = _run_worker(where, folder, quantize, len(examples), integer_io)
    left_in_float = float_ops(flatbuffer)
    if left_in_float:
        counts = ", ".join(f"{op} x{left_in_float.count(op)}"
                           for op in sorted(set(left_in_float)))
        warnings.warn(f'{where}: quantize="{quantize}": the quantizer left ops in float, '
                      f"between a DEQUANTIZE and a QUANTIZE ({counts}); LiteRT runs them, "
                      "an integer-only runtime (TFLite Micro, an Edge TPU) refuses them.",
                      UserWarning, stacklevel=4)
    return flatbuffer


def _run_worker(where: str, folder: str, quantize: str, count: int,
                integer_io: bool = False) -> bytes:
    command = [*python_command(module="keras_seq.export._integer_worker"), folder, quantize,
               str(count), *(["integer_io"] if integer_io else [])]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}
    try:
        finished = subprocess.run(command, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, timeout=_WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ArgumentValueError(where, f'quantize="{quantize}": the quantizer ran past '
                                 f"{_WORKER_TIMEOUT_S} s and was stopped.") from None
    failure = os.path.join(folder, _FAILURE)
    if os.path.exists(failure):
        with open(failure) as f:
            raise ArgumentValueError(where, f'quantize="{quantize}": {f.read().strip()}')
    if finished.returncode != 0:
        stage = ("LiteRT, loading the integer model the converter wrote,"
                 if os.path.exists(os.path.join(folder, _CONVERTED))
                 else "TensorFlow's quantizer")
        how = (f"signal {-finished.returncode}" if finished.returncode < 0
               else f"exit status {finished.returncode}")
        hint = (" (16x8 lacks kernels some graphs need: try quantize=\"int8\")"
                if quantize == "int16x8" else "")
        raise ArgumentValueError(where, f'quantize="{quantize}": {stage} crashed ({how}) on '
                                 f"this model{hint}; the model was not converted.")
    with open(os.path.join(folder, _FLATBUFFER), "rb") as f:
        return f.read()


def float_ops(flatbuffer: bytes) -> list[str]:
    """The ops of ``flatbuffer`` that read or write a float tensor, besides
    the QUANTIZE at a float input and the DEQUANTIZE at a float output:
    empty for an integer-only model."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(flatbuffer, 0))
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    floating = {schema.TensorType.FLOAT32, schema.TensorType.FLOAT16}
    found = []
    for subgraph in model.subgraphs:
        for op in subgraph.operators:
            code = model.operatorCodes[op.opcodeIndex]
            name = names.get(max(code.builtinCode, code.deprecatedBuiltinCode), "CUSTOM")
            tensors = [i for i in [*op.inputs, *op.outputs] if i >= 0]
            if name in ("QUANTIZE", "DEQUANTIZE"):
                continue
            if any(subgraph.tensors[i].type in floating for i in tensors):
                found.append(name)
    return found


def first_line(error: BaseException) -> str:
    """The converter's error in one line (its first that says something)."""
    for line in str(error).splitlines():
        line = line.strip()
        if line and not line.startswith(("<unknown>", "Traceback")):
            return line[:300]
    return type(error).__name__


def worker_paths() -> tuple[str, str, str, str]:
    """The names of the child's flatbuffer, failure, progress and float input files."""
    return _FLATBUFFER, _FAILURE, _CONVERTED, _FLOAT_FLATBUFFER

