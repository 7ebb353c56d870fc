"""Integer ops that LiteRT has and TensorFlow Lite for Microcontrollers
lacks, written with ops both have.

TFLite Micro (TFLM) is the integer-only runtime of microcontrollers. It
registers fewer op versions than LiteRT. `portable` rewrites an integer
flatbuffer so that both runtimes run it, LiteRT with the same outputs as
before (each rewrite is tested against LiteRT's kernel for the op it
replaces, in `tests/test_portable_ops.py`):

- ``SELECT`` whose condition has the data's shape: ``SELECT_V2`` (TFLM has
  only the second; the two agree there, while a rank-1 condition picks
  rows in ``SELECT`` and is left as it is). MinGRU's and MinLSTM's
  ``where``.
- An int8 ``EXP``, ``LOG``, ``SQRT`` or ``GELU`` (TFLM: float32 only; no
  ``GELU`` at all): a table of its
  256 results read by ``GATHER``, indexed by the input made int32
  (``CAST``) plus 128 (``ADD``); 256 bytes. For ``EXP`` and ``LOG`` the
  table is the one LiteRT's kernel fills (the same bytes out); LiteRT's
  int8 ``SQRT`` truncates, the table rounds to the nearest code. The NTM's
  addressing, RG-LRU's, MinLSTM's and sLSTM's gates, a block's GELU.
- An int16 comparison of two tensors in one scale (16x8 MinGRU's
  ``x >= 0``; TFLM compares int8, int32 and float only): the int32 codes
  compared.
- An int16 ``FILL`` (the zero cell state of a fused int8 LSTM; TFLM fills
  float32, int32 and int8 only): a ``CAST`` of int8 zeros.
- An int32 ``SELECT_V2`` (Keras' ``Embedding`` wrapping negative ids;
  TFLM selects float32, int8 and int16 only): ``b + int(c) * (a - b)`` in
  int32.
- A ``GATHER`` of bools (a mask's step; TFLM gathers float32 and int8
  only): the bools made int8, gathered, compared with 0.
- ``REDUCE_ANY`` (TFLM has ``REDUCE_ALL`` only): ``not all(not x)``.
- An int16 ``REDUCE_MAX`` or ``REDUCE_MIN`` in one scale (16x8 masked
  attention's fill; TFLM reduces float32 and int8 only): each reduced axis
  split, its slices' ``MAXIMUM`` (``MINIMUM``) taken pairwise.
- A ``GATHER`` from an int16 table (a 16x8 ``Embedding`` over token ids;
  TFLM gathers float32 and int8 only): each code stored as two int8
  halves, gathered, and put together exactly in int32
  (``256 * high + low``), then made int16.

Left as they are (such a file runs in LiteRT, not in TFLM): int16
``EXP``, ``LOG``, ``DIV``, ``SQRT`` and ``GELU`` (16x8 NTM, MinLSTM, RG-LRU,
sLSTM, a recurrent block's feed-forward: a table would take 65,536
entries).

References: ``tensorflow/lite/micro/kernels/`` (``exp.cc``,
``elementwise.cc``, ``select.cc``, ``gather.cc``, ``fill.cc``,
``comparisons.cc``, ``cast.cc``, ``reduce.cc``) and LiteRT's
``tensorflow/lite/kernels/`` (``exp.cc``, ``elementwise.cc``).
"""

from __future__ import annotations

import copy
import functools
import math

import numpy as np

from keras_seq.export._flatbuffer import (
    add_tensor,
    code_of,
    load_model,
    new_operator,
    opcode_index,
    pack_model,
    schema_module,
)


def portable(flatbuffer: bytes) -> bytes:
    """`flatbuffer` (integer) with the rewrites of the module docstring."""
    model_t = load_model(flatbuffer)
    changed = False
    for subgraph in model_t.subgraphs:
        changed |= _selects_as_v2(model_t, subgraph)
        changed |= _int8_tables(model_t, subgraph)
        changed |= _int16_comparisons_in_int32(model_t, subgraph)
        changed |= _int16_fills_as_casts(model_t, subgraph)
        changed |= _int32_selects_as_arithmetic(model_t, subgraph)
        changed |= _bool_gathers_as_int8(model_t, subgraph)
        changed |= _any_as_all(model_t, subgraph)
        changed |= _int16_gathers_as_bytes(model_t, subgraph)
        changed |= _int16_extremes_as_pairs(model_t, subgraph)
    return pack_model(model_t) if changed else flatbuffer


def _selects_as_v2(model_t, subgraph) -> bool:
    schema = schema_module()
    changed = False
    for op in subgraph.operators:
        if code_of(model_t, op) != schema.BuiltinOperator.SELECT:
            continue
        shapes = [_shape(subgraph.tensors[int(i)]) for i in op.inputs]
        if shapes[0] is None or any(s != shapes[0] for s in shapes[1:]):
            continue  # a rank-1 condition picks rows: not SELECT_V2's broadcast
        op.opcodeIndex = opcode_index(model_t, schema.BuiltinOperator.SELECT_V2)
        op.builtinOptionsType = schema.BuiltinOptions.SelectV2Options
        op.builtinOptions = schema.SelectV2OptionsT()
        changed = True
    return changed


def _shape(tensor):
    return None if tensor.shape is None else tuple(int(d) for d in tensor.shape)


def _gelu(x, approximate=False):
    if approximate:
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / np.sqrt(2.0)))


# Unary int8 ops TFLite Micro computes in float32 only (GELU: not at all),
# by their function.
_TABLED = {"EXP": np.exp, "LOG": np.log, "SQRT": np.sqrt, "GELU": _gelu}


def _int8_tables(model_t, subgraph) -> bool:
    schema = schema_module()
    functions = {getattr(schema.BuiltinOperator, name): f for name, f in _TABLED.items()}
    operators, changed = [], False
    for op in subgraph.operators:
        function = functions.get(code_of(model_t, op))
        source, target = ((None, None) if function is None else
                          (subgraph.tensors[int(op.inputs[0])],
                           subgraph.tensors[int(op.outputs[0])]))
        if (function is None or source.type != schema.TensorType.INT8
                or target.type != schema.TensorType.INT8):
            operators.append(op)
            continue
        if function is _gelu:
            approximate = bool(op.builtinOptions is not None and op.builtinOptions.approximate)
            function = functools.partial(_gelu, approximate=approximate)
        operators.extend(_table_lookup(model_t, subgraph, op, source, target, function))
        changed = True
    subgraph.operators = operators
    return changed


def _table_lookup(model_t, subgraph, op, source, target, function) -> list:
    """``CAST``, ``ADD`` and ``GATHER`` computing int8 ``function`` as a table."""
    schema = schema_module()
    in_scale, in_zero = float(source.quantization.scale[0]), int(source.quantization.zeroPoint[0])
    out_scale = float(target.quantization.scale[0])
    out_zero = int(target.quantization.zeroPoint[0])
    table = int8_table(function, in_scale, in_zero, out_scale, out_zero)
    table_index = add_tensor(model_t, subgraph, table, schema.TensorType.INT8, None,
                             copy.deepcopy(target.quantization))
    offset = add_tensor(model_t, subgraph, np.array([128], np.int32),
                        schema.TensorType.INT32, None)
    as_int32, index = (_int32_like(subgraph, source) for _ in range(2))
    cast = _cast(model_t, int(op.inputs[0]), as_int32, schema.TensorType.INT8)
    add = new_operator(model_t, schema.BuiltinOperator.ADD, [as_int32, offset], [index])
    add.builtinOptionsType = schema.BuiltinOptions.AddOptions
    add.builtinOptions = schema.AddOptionsT()
    gather = new_operator(model_t, schema.BuiltinOperator.GATHER, [table_index, index],
                          [int(op.outputs[0])])
    gather.builtinOptionsType = schema.BuiltinOptions.GatherOptions
    gather.builtinOptions = schema.GatherOptionsT()
    gather.builtinOptions.axis = 0
    return [cast, add, gather]


def int8_table(function, in_scale: float, in_zero: int, out_scale: float,
               out_zero: int) -> np.ndarray:
    """``function``'s int8 result for each int8 code -128..127, computed as
    LiteRT fills its kernels' tables: in float32, rounded half away from
    zero; a result that is not a number (the log of a negative) is the
    lowest code, as LiteRT's conversion of it gives on x86."""
    with np.errstate(all="ignore"):
        codes = np.arange(-128, 128, dtype=np.int32) - np.int32(in_zero)
        real = function(np.float32(in_scale) * codes.astype(np.float32)).astype(np.float32)
        scaled = real * np.float32(1.0 / np.float32(out_scale))
        rounded = np.sign(scaled) * np.floor(np.abs(scaled) + np.float32(0.5))
        rounded = np.where(np.isnan(rounded), -np.inf, rounded)
        return np.clip(rounded + out_zero, -128, 127).astype(np.int8)


_COMPARISONS = ("EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL")


def _int16_comparisons_in_int32(model_t, subgraph) -> bool:
    schema = schema_module()
    comparisons = {getattr(schema.BuiltinOperator, name) for name in _COMPARISONS}
    operators, changed = [], False
    for op in subgraph.operators:
        sides = ([subgraph.tensors[int(i)] for i in op.inputs]
                 if code_of(model_t, op) in comparisons else [])
        if (not sides or any(t.type != schema.TensorType.INT16 for t in sides)
                or _quantization_of(sides[0]) != _quantization_of(sides[1])):
            operators.append(op)
            continue
        inputs = []
        for index, side in zip((int(i) for i in op.inputs), sides):
            data = model_t.buffers[side.buffer].data
            if data is not None and len(data):  # a constant: stored as int32
                codes = np.frombuffer(np.asarray(data, np.uint8).tobytes(), np.int16)
                inputs.append(add_tensor(model_t, subgraph,
                                         codes.astype(np.int32).reshape(_shape(side) or ()),
                                         schema.TensorType.INT32, None))
                continue
            widened = _int32_like(subgraph, side)
            operators.append(_cast(model_t, index, widened, schema.TensorType.INT16))
            inputs.append(widened)
        op.inputs = np.array(inputs, np.int32)
        operators.append(op)
        changed = True
    subgraph.operators = operators
    return changed


def _int16_fills_as_casts(model_t, subgraph) -> bool:
    schema = schema_module()
    changed = False
    for op in subgraph.operators:
        if code_of(model_t, op) != schema.BuiltinOperator.FILL:
            continue
        dims, value = (subgraph.tensors[int(i)] for i in op.inputs)
        dims_data, value_data = (model_t.buffers[t.buffer].data for t in (dims, value))
        if (value.type != schema.TensorType.INT16 or dims_data is None or value_data is None
                or not len(dims_data) or not len(value_data)):
            continue
        shape = np.frombuffer(np.asarray(dims_data, np.uint8).tobytes(),
                              {schema.TensorType.INT32: np.int32,
                               schema.TensorType.INT64: np.int64}[dims.type])
        code = int(np.frombuffer(np.asarray(value_data, np.uint8).tobytes(), np.int16)[0])
        if not -128 <= code <= 127:
            continue
        filled = add_tensor(model_t, subgraph, np.full(shape, code, np.int8),
                            schema.TensorType.INT8, None)
        cast = _cast(model_t, filled, int(op.outputs[0]), schema.TensorType.INT8,
                     schema.TensorType.INT16)
        op.opcodeIndex, op.inputs = cast.opcodeIndex, cast.inputs
        op.builtinOptionsType, op.builtinOptions = cast.builtinOptionsType, cast.builtinOptions
        changed = True
    return changed


def _int32_selects_as_arithmetic(model_t, subgraph) -> bool:
    schema = schema_module()
    operators, changed = [], False
    for op in subgraph.operators:
        output = int(op.outputs[0])
        if (code_of(model_t, op) != schema.BuiltinOperator.SELECT_V2
                or subgraph.tensors[output].type != schema.TensorType.INT32):
            operators.append(op)
            continue
        condition, first, second = (int(i) for i in op.inputs)
        shapes = [_shape(subgraph.tensors[i]) for i in (condition, first, second)]
        as_int = _new(subgraph, schema.TensorType.INT32, shapes[0])
        difference = _new(subgraph, schema.TensorType.INT32,
                          np.broadcast_shapes(shapes[1], shapes[2]))
        taken = _new(subgraph, schema.TensorType.INT32,
                     np.broadcast_shapes(shapes[0], shapes[1], shapes[2]))
        # second + condition * (first - second), exactly, in int32
        operators += [_cast(model_t, condition, as_int, schema.TensorType.BOOL),
                      _arithmetic(model_t, "SUB", [first, second], difference),
                      _arithmetic(model_t, "MUL", [as_int, difference], taken),
                      _arithmetic(model_t, "ADD", [second, taken], output)]
        changed = True
    subgraph.operators = operators
    return changed


def _bool_gathers_as_int8(model_t, subgraph) -> bool:
    schema = schema_module()
    operators, changed = [], False
    for op in subgraph.operators:
        if (code_of(model_t, op) != schema.BuiltinOperator.GATHER
                or subgraph.tensors[int(op.inputs[0])].type != schema.TensorType.BOOL):
            operators.append(op)
            continue
        params, output = int(op.inputs[0]), int(op.outputs[0])
        shape = _shape(subgraph.tensors[output])
        as_int8 = _new(subgraph, schema.TensorType.INT8, _shape(subgraph.tensors[params]))
        gathered = _new(subgraph, schema.TensorType.INT8, shape)
        widened = _new(subgraph, schema.TensorType.INT32, shape)
        zero = add_tensor(model_t, subgraph, np.zeros((), np.int32), schema.TensorType.INT32,
                          None)
        operators.append(_cast(model_t, params, as_int8, schema.TensorType.BOOL,
                               schema.TensorType.INT8))
        op.inputs = np.array([as_int8, *(int(i) for i in op.inputs[1:])], np.int32)
        op.outputs = np.array([gathered], np.int32)
        operators += [op, _cast(model_t, gathered, widened, schema.TensorType.INT8),
                      new_operator(model_t, schema.BuiltinOperator.NOT_EQUAL,
                                   [widened, zero], [output])]
        changed = True
    subgraph.operators = operators
    return changed


def _any_as_all(model_t, subgraph) -> bool:
    schema = schema_module()
    operators, changed = [], False
    for op in subgraph.operators:
        if code_of(model_t, op) != schema.BuiltinOperator.REDUCE_ANY:
            operators.append(op)
            continue
        source, axes = (int(i) for i in op.inputs)
        output = int(op.outputs[0])
        negated = _new(subgraph, schema.TensorType.BOOL, _shape(subgraph.tensors[source]))
        none_true = _new(subgraph, schema.TensorType.BOOL, _shape(subgraph.tensors[output]))
        # any(x) = not all(not x)
        reduce = new_operator(model_t, schema.BuiltinOperator.REDUCE_ALL, [negated, axes],
                              [none_true])
        reduce.builtinOptionsType, reduce.builtinOptions = (op.builtinOptionsType,
                                                            op.builtinOptions)
        operators += [new_operator(model_t, schema.BuiltinOperator.LOGICAL_NOT, [source],
                                   [negated]),
                      reduce,
                      new_operator(model_t, schema.BuiltinOperator.LOGICAL_NOT, [none_true],
                                   [output])]
        changed = True
    subgraph.operators = operators
    return changed


def _int16_gathers_as_bytes(model_t, subgraph) -> bool:
    schema = schema_module()
    operators, changed = [], False
    for op in subgraph.operators:
        table = (subgraph.tensors[int(op.inputs[0])]
                 if code_of(model_t, op) == schema.BuiltinOperator.GATHER else None)
        data = None if table is None else model_t.buffers[table.buffer].data
        options = op.builtinOptions
        if (table is None or table.type != schema.TensorType.INT16 or data is None
                or not len(data) or len(_shape(table)) != 2
                or (options is not None and (options.axis or options.batchDims))):
            operators.append(op)
            continue
        codes = np.frombuffer(np.asarray(data, np.uint8).tobytes(), np.int16)
        codes = codes.astype(np.int32).reshape(_shape(table))
        high = np.floor_divide(codes, 256)  # codes = 256 * high + low, low in 0..255
        low = codes - 256 * high
        halves = np.concatenate([high, low - 128], axis=1).astype(np.int8)
        output = int(op.outputs[0])
        shape = _shape(subgraph.tensors[output])
        both = shape[:-1] + (2 * shape[-1],)
        halves_index = add_tensor(model_t, subgraph, halves, schema.TensorType.INT8, None)
        gathered, widened = (_new(subgraph, t, both)
                             for t in (schema.TensorType.INT8, schema.TensorType.INT32))
        high_part, low_part, scaled, summed, code = (
            _new(subgraph, schema.TensorType.INT32, shape) for _ in range(5))
        axis = add_tensor(model_t, subgraph, np.array(len(shape) - 1, np.int32),
                          schema.TensorType.INT32, None)
        constants = [add_tensor(model_t, subgraph, np.array(v, np.int32),
                                schema.TensorType.INT32, None) for v in (256, 128)]
        gather = new_operator(model_t, schema.BuiltinOperator.GATHER,
                              [halves_index, int(op.inputs[1])], [gathered])
        gather.builtinOptionsType, gather.builtinOptions = op.builtinOptionsType, options
        split = new_operator(model_t, schema.BuiltinOperator.SPLIT, [axis, widened],
                             [high_part, low_part])
        split.builtinOptionsType = schema.BuiltinOptions.SplitOptions
        split.builtinOptions = schema.SplitOptionsT()
        split.builtinOptions.numSplits = 2
        # The int16 code, exactly: 256 * high + (low - 128) + 128, in int32.
        operators += [gather, _cast(model_t, gathered, widened, schema.TensorType.INT8), split,
                      _arithmetic(model_t, "MUL", [high_part, constants[0]], scaled),
                      _arithmetic(model_t, "ADD", [scaled, low_part], summed),
                      _arithmetic(model_t, "ADD", [summed, constants[1]], code),
                      _cast(model_t, code, output, schema.TensorType.INT32,
                            schema.TensorType.INT16)]
        changed = True
    subgraph.operators = operators
    return changed


_PAIRWISE = {"REDUCE_MAX": "MAXIMUM", "REDUCE_MIN": "MINIMUM"}


def _int16_extremes_as_pairs(model_t, subgraph) -> bool:
    schema = schema_module()
    pairwise = {getattr(schema.BuiltinOperator, reduce): getattr(schema.BuiltinOperator, pair)
                for reduce, pair in _PAIRWISE.items()}
    operators, changed = [], False
    for op in subgraph.operators:
        pair = pairwise.get(code_of(model_t, op))
        source, axes = ((None, None) if pair is None else
                        (subgraph.tensors[int(op.inputs[0])], subgraph.tensors[int(op.inputs[1])]))
        output = None if pair is None else subgraph.tensors[int(op.outputs[0])]
        axes_data = None if axes is None else model_t.buffers[axes.buffer].data
        if (pair is None or source.type != schema.TensorType.INT16 or axes_data is None
                or not len(axes_data) or _quantization_of(source) != _quantization_of(output)):
            operators.append(op)
            continue
        shape = _shape(source)
        reduced = {int(a) % len(shape) for a in np.frombuffer(
            np.asarray(axes_data, np.uint8).tobytes(), np.int32)}
        running = int(op.inputs[0])
        for axis in sorted(reduced):  # each axis split, its slices compared pairwise
            if shape[axis] == 1:
                continue
            kept = shape[:axis] + (1,) + shape[axis + 1:]
            pieces = [_activation_like(subgraph, source, kept) for _ in range(shape[axis])]
            axis_index = add_tensor(model_t, subgraph, np.array(axis, np.int32),
                                    schema.TensorType.INT32, None)
            split = new_operator(model_t, schema.BuiltinOperator.SPLIT, [axis_index, running],
                                 pieces)
            split.builtinOptionsType = schema.BuiltinOptions.SplitOptions
            split.builtinOptions = schema.SplitOptionsT()
            split.builtinOptions.numSplits = len(pieces)
            operators.append(split)
            running = pieces[0]
            for piece in pieces[1:]:  # the raw codes: one scale in and out
                combined = _activation_like(subgraph, source, kept)
                operators.append(new_operator(model_t, pair, [running, piece], [combined]))
                running = combined
            shape = kept
        target = _shape(output) or ()
        operators.append(new_operator(
            model_t, schema.BuiltinOperator.RESHAPE,
            [running, add_tensor(model_t, subgraph, np.array(target, np.int32).reshape(-1),
                                 schema.TensorType.INT32, None)], [int(op.outputs[0])]))
        changed = True
    subgraph.operators = operators
    return changed


def _activation_like(subgraph, like, shape) -> int:
    """A new data-less tensor of ``like``'s type and quantization, of ``shape``."""
    index = _new(subgraph, like.type, shape)
    subgraph.tensors[index].quantization = copy.deepcopy(like.quantization)
    return index


def _arithmetic(model_t, name: str, inputs: list[int], output: int):
    schema = schema_module()
    op = new_operator(model_t, getattr(schema.BuiltinOperator, name), inputs, [output])
    options = {"ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions"}[name]
    op.builtinOptionsType = getattr(schema.BuiltinOptions, options)
    op.builtinOptions = getattr(schema, options + "T")()
    return op


def _new(subgraph, tensor_type: int, shape) -> int:
    """A new data-less tensor of ``shape``."""
    tensor = schema_module().TensorT()
    tensor.shape = None if shape is None else np.array(shape, np.int32)
    tensor.type = tensor_type
    tensor.buffer = 0
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1


def _quantization_of(tensor) -> tuple:
    q = tensor.quantization
    if q is None or q.scale is None:
        return ()
    return (tuple(np.asarray(q.scale).tolist()), tuple(np.asarray(q.zeroPoint).tolist()))


def _cast(model_t, source: int, target: int, from_type: int, to_type: int | None = None):
    """A ``CAST`` of tensor ``source`` (``from_type``) into ``target`` (default int32)."""
    schema = schema_module()
    cast = new_operator(model_t, schema.BuiltinOperator.CAST, [source], [target])
    cast.builtinOptionsType = schema.BuiltinOptions.CastOptions
    cast.builtinOptions = schema.CastOptionsT()
    cast.builtinOptions.inDataType = from_type
    cast.builtinOptions.outDataType = (schema.TensorType.INT32 if to_type is None
                                       else to_type)
    return cast


def _int32_like(subgraph, like) -> int:
    tensor = schema_module().TensorT()
    tensor.shape = None if like.shape is None else np.array(like.shape, np.int32)
    tensor.shapeSignature = like.shapeSignature
    tensor.type = schema_module().TensorType.INT32
    tensor.buffer = 0
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1
