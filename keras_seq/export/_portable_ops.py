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
    add_activation,
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
        for rewrite in _REWRITES:
            operators = []
            for op in subgraph.operators:
                replacement = rewrite(model_t, subgraph, op)
                operators.extend([op] if replacement is None else replacement)
                changed |= replacement is not None
            subgraph.operators = operators
    return pack_model(model_t) if changed else flatbuffer


# Each rewrite takes one op: the ops that replace it, or None (kept).


def _select_as_v2(model_t, subgraph, op) -> list | None:
    schema = schema_module()
    if code_of(model_t, op) != schema.BuiltinOperator.SELECT:
        return None
    shapes = [_shape(subgraph.tensors[int(i)]) for i in op.inputs]
    if shapes[0] is None or any(s != shapes[0] for s in shapes[1:]):
        return None  # a rank-1 condition picks rows: not SELECT_V2's broadcast
    op.opcodeIndex = opcode_index(model_t, schema.BuiltinOperator.SELECT_V2)
    op.builtinOptionsType = schema.BuiltinOptions.SelectV2Options
    op.builtinOptions = schema.SelectV2OptionsT()
    return [op]


def _gelu(x, approximate=False):
    if approximate:
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / np.sqrt(2.0)))


# Unary int8 ops TFLite Micro computes in float32 only (GELU: not at all),
# by their function.
_TABLED = {"EXP": np.exp, "LOG": np.log, "SQRT": np.sqrt, "GELU": _gelu}


def _int8_table_lookup(model_t, subgraph, op) -> list | None:
    """``CAST``, ``ADD`` and ``GATHER`` computing an int8 function as a table."""
    schema = schema_module()
    functions = {getattr(schema.BuiltinOperator, name): f for name, f in _TABLED.items()}
    function = functions.get(code_of(model_t, op))
    if function is None:
        return None
    source, target = subgraph.tensors[int(op.inputs[0])], subgraph.tensors[int(op.outputs[0])]
    if source.type != schema.TensorType.INT8 or target.type != schema.TensorType.INT8:
        return None
    if function is _gelu:
        approximate = bool(op.builtinOptions is not None and op.builtinOptions.approximate)
        function = functools.partial(_gelu, approximate=approximate)
    table = int8_table(function, float(source.quantization.scale[0]),
                       int(source.quantization.zeroPoint[0]),
                       float(target.quantization.scale[0]), int(target.quantization.zeroPoint[0]))
    table_index = add_tensor(model_t, subgraph, table, schema.TensorType.INT8, None,
                             copy.deepcopy(target.quantization))
    as_int32, index = (add_activation(subgraph, schema.TensorType.INT32, _shape(source))
                       for _ in range(2))
    gather = new_operator(model_t, schema.BuiltinOperator.GATHER, [table_index, index],
                          [int(op.outputs[0])])
    gather.builtinOptionsType = schema.BuiltinOptions.GatherOptions
    gather.builtinOptions = schema.GatherOptionsT()
    return [_cast(model_t, int(op.inputs[0]), as_int32, schema.TensorType.INT8),
            _arithmetic(model_t, "ADD", [as_int32, _int32(model_t, subgraph, [128])], index),
            gather]


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


def _int16_comparison_in_int32(model_t, subgraph, op) -> list | None:
    schema = schema_module()
    if code_of(model_t, op) not in {getattr(schema.BuiltinOperator, n) for n in _COMPARISONS}:
        return None
    sides = [subgraph.tensors[int(i)] for i in op.inputs]
    if (any(t.type != schema.TensorType.INT16 for t in sides)
            or _quantization_of(sides[0]) != _quantization_of(sides[1])):
        return None
    replacement, inputs = [], []
    for index, side in zip((int(i) for i in op.inputs), sides):
        codes = _constant(model_t, side, np.int16)
        if codes is not None:  # a constant: stored as int32
            inputs.append(_int32(model_t, subgraph, codes.reshape(_shape(side) or ())))
            continue
        widened = add_activation(subgraph, schema.TensorType.INT32, _shape(side))
        replacement.append(_cast(model_t, index, widened, schema.TensorType.INT16))
        inputs.append(widened)
    op.inputs = np.array(inputs, np.int32)
    return [*replacement, op]


def _int16_fill_as_cast(model_t, subgraph, op) -> list | None:
    schema = schema_module()
    if code_of(model_t, op) != schema.BuiltinOperator.FILL:
        return None
    dims, value = (subgraph.tensors[int(i)] for i in op.inputs)
    if value.type != schema.TensorType.INT16:
        return None
    shape = _constant(model_t, dims, {schema.TensorType.INT32: np.int32,
                                      schema.TensorType.INT64: np.int64}.get(dims.type))
    code = _constant(model_t, value, np.int16)
    if shape is None or code is None or not -128 <= int(code[0]) <= 127:
        return None
    filled = add_tensor(model_t, subgraph, np.full(shape, int(code[0]), np.int8),
                        schema.TensorType.INT8, None)
    return [_cast(model_t, filled, int(op.outputs[0]), schema.TensorType.INT8,
                  schema.TensorType.INT16)]


def _int32_select_as_arithmetic(model_t, subgraph, op) -> list | None:
    schema = schema_module()
    if (code_of(model_t, op) != schema.BuiltinOperator.SELECT_V2
            or subgraph.tensors[int(op.outputs[0])].type != schema.TensorType.INT32):
        return None
    condition, first, second = (int(i) for i in op.inputs)
    shapes = [_shape(subgraph.tensors[i]) for i in (condition, first, second)]
    as_int = add_activation(subgraph, schema.TensorType.INT32, shapes[0])
    difference = add_activation(subgraph, schema.TensorType.INT32, np.broadcast_shapes(*shapes[1:]))
    taken = add_activation(subgraph, schema.TensorType.INT32, np.broadcast_shapes(*shapes))
    # second + condition * (first - second), exactly, in int32
    return [_cast(model_t, condition, as_int, schema.TensorType.BOOL),
            _arithmetic(model_t, "SUB", [first, second], difference),
            _arithmetic(model_t, "MUL", [as_int, difference], taken),
            _arithmetic(model_t, "ADD", [second, taken], int(op.outputs[0]))]


def _bool_gather_as_int8(model_t, subgraph, op) -> list | None:
    schema = schema_module()
    if (code_of(model_t, op) != schema.BuiltinOperator.GATHER
            or subgraph.tensors[int(op.inputs[0])].type != schema.TensorType.BOOL):
        return None
    params, output = int(op.inputs[0]), int(op.outputs[0])
    shape = _shape(subgraph.tensors[output])
    as_int8 = add_activation(subgraph, schema.TensorType.INT8, _shape(subgraph.tensors[params]))
    gathered = add_activation(subgraph, schema.TensorType.INT8, shape)
    widened = add_activation(subgraph, schema.TensorType.INT32, shape)
    cast = _cast(model_t, params, as_int8, schema.TensorType.BOOL, schema.TensorType.INT8)
    op.inputs = np.array([as_int8, *(int(i) for i in op.inputs[1:])], np.int32)
    op.outputs = np.array([gathered], np.int32)
    return [cast, op, _cast(model_t, gathered, widened, schema.TensorType.INT8),
            new_operator(model_t, schema.BuiltinOperator.NOT_EQUAL,
                         [widened, _int32(model_t, subgraph, 0)], [output])]


def _any_as_all(model_t, subgraph, op) -> list | None:
    schema = schema_module()
    if code_of(model_t, op) != schema.BuiltinOperator.REDUCE_ANY:
        return None
    source, axes = (int(i) for i in op.inputs)
    output = int(op.outputs[0])
    negated = add_activation(subgraph, schema.TensorType.BOOL, _shape(subgraph.tensors[source]))
    none_true = add_activation(subgraph, schema.TensorType.BOOL, _shape(subgraph.tensors[output]))
    reduce = new_operator(model_t, schema.BuiltinOperator.REDUCE_ALL, [negated, axes],
                          [none_true])
    reduce.builtinOptionsType, reduce.builtinOptions = op.builtinOptionsType, op.builtinOptions
    # any(x) = not all(not x)
    return [new_operator(model_t, schema.BuiltinOperator.LOGICAL_NOT, [source], [negated]),
            reduce,
            new_operator(model_t, schema.BuiltinOperator.LOGICAL_NOT, [none_true], [output])]


def _int16_gather_as_bytes(model_t, subgraph, op) -> list | None:
    schema = schema_module()
    if code_of(model_t, op) != schema.BuiltinOperator.GATHER:
        return None
    table, options = subgraph.tensors[int(op.inputs[0])], op.builtinOptions
    codes = (_constant(model_t, table, np.int16)
             if table.type == schema.TensorType.INT16 else None)
    if (codes is None or len(_shape(table)) != 2
            or (options is not None and (options.axis or options.batchDims))):
        return None
    codes = codes.astype(np.int32).reshape(_shape(table))
    high = np.floor_divide(codes, 256)  # codes = 256 * high + low, low in 0..255
    halves = np.concatenate([high, codes - 256 * high - 128], axis=1).astype(np.int8)
    output = int(op.outputs[0])
    shape = _shape(subgraph.tensors[output])
    both = shape[:-1] + (2 * shape[-1],)
    gathered, widened = (add_activation(subgraph, t, both)
                         for t in (schema.TensorType.INT8, schema.TensorType.INT32))
    high_part, low_part, scaled, summed, code = (
        add_activation(subgraph, schema.TensorType.INT32, shape) for _ in range(5))
    gather = new_operator(model_t, schema.BuiltinOperator.GATHER,
                          [add_tensor(model_t, subgraph, halves, schema.TensorType.INT8, None),
                           int(op.inputs[1])], [gathered])
    gather.builtinOptionsType, gather.builtinOptions = op.builtinOptionsType, options
    # The int16 code, exactly: 256 * high + (low - 128) + 128, in int32.
    return [gather, _cast(model_t, gathered, widened, schema.TensorType.INT8),
            _split(model_t, subgraph, widened, len(shape) - 1, [high_part, low_part]),
            _arithmetic(model_t, "MUL", [high_part, _int32(model_t, subgraph, 256)], scaled),
            _arithmetic(model_t, "ADD", [scaled, low_part], summed),
            _arithmetic(model_t, "ADD", [summed, _int32(model_t, subgraph, 128)], code),
            _cast(model_t, code, output, schema.TensorType.INT32, schema.TensorType.INT16)]


_PAIRWISE = {"REDUCE_MAX": "MAXIMUM", "REDUCE_MIN": "MINIMUM"}


def _int16_extreme_as_pairs(model_t, subgraph, op) -> list | None:
    schema = schema_module()
    pairwise = {getattr(schema.BuiltinOperator, reduce): getattr(schema.BuiltinOperator, pair)
                for reduce, pair in _PAIRWISE.items()}
    pair = pairwise.get(code_of(model_t, op))
    if pair is None:
        return None
    source, output = subgraph.tensors[int(op.inputs[0])], subgraph.tensors[int(op.outputs[0])]
    axes = _constant(model_t, subgraph.tensors[int(op.inputs[1])], np.int32)
    if (source.type != schema.TensorType.INT16 or axes is None
            or _quantization_of(source) != _quantization_of(output)):
        return None
    shape = _shape(source)
    replacement, running = [], int(op.inputs[0])
    for axis in sorted({int(a) % len(shape) for a in axes}):
        if shape[axis] == 1:
            continue
        kept = shape[:axis] + (1,) + shape[axis + 1:]
        pieces = [_activation_like(subgraph, source, kept) for _ in range(shape[axis])]
        replacement.append(_split(model_t, subgraph, running, axis, pieces))
        running = pieces[0]
        for piece in pieces[1:]:  # the raw codes compared: one scale in and out
            combined = _activation_like(subgraph, source, kept)
            replacement.append(new_operator(model_t, pair, [running, piece], [combined]))
            running = combined
        shape = kept
    target = np.array(_shape(output) or (), np.int32).reshape(-1)
    replacement.append(new_operator(model_t, schema.BuiltinOperator.RESHAPE,
                                    [running, _int32(model_t, subgraph, target)],
                                    [int(op.outputs[0])]))
    return replacement


_REWRITES = (_select_as_v2, _int8_table_lookup, _int16_comparison_in_int32,
             _int16_fill_as_cast, _int32_select_as_arithmetic, _bool_gather_as_int8,
             _any_as_all, _int16_gather_as_bytes, _int16_extreme_as_pairs)


# --- helpers ---


def _shape(tensor):
    return None if tensor.shape is None else tuple(int(d) for d in tensor.shape)


def _constant(model_t, tensor, dtype) -> np.ndarray | None:
    """A constant tensor's values (flat) as ``dtype``; None for an activation."""
    data = model_t.buffers[tensor.buffer].data
    if dtype is None or data is None or not len(data):
        return None
    return np.frombuffer(np.asarray(data, np.uint8).tobytes(), dtype)


def _int32(model_t, subgraph, value) -> int:
    """A new int32 constant."""
    return add_tensor(model_t, subgraph, np.asarray(value, np.int32),
                      schema_module().TensorType.INT32, None)


def _activation_like(subgraph, like, shape) -> int:
    """A new data-less tensor of ``like``'s type and quantization, of ``shape``."""
    return add_activation(subgraph, like.type, shape,
                          quantization=copy.deepcopy(like.quantization))


def _quantization_of(tensor) -> tuple:
    q = tensor.quantization
    if q is None or q.scale is None:
        return ()
    return (tuple(np.asarray(q.scale).tolist()), tuple(np.asarray(q.zeroPoint).tolist()))


def _arithmetic(model_t, name: str, inputs: list[int], output: int):
    schema = schema_module()
    op = new_operator(model_t, getattr(schema.BuiltinOperator, name), inputs, [output])
    options = {"ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions"}[name]
    op.builtinOptionsType = getattr(schema.BuiltinOptions, options)
    op.builtinOptions = getattr(schema, options + "T")()
    return op


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


def _split(model_t, subgraph, source: int, axis: int, pieces: list[int]):
    """A ``SPLIT`` of tensor ``source`` along ``axis`` into ``pieces``."""
    schema = schema_module()
    split = new_operator(model_t, schema.BuiltinOperator.SPLIT,
                         [_int32(model_t, subgraph, axis), source], pieces)
    split.builtinOptionsType = schema.BuiltinOptions.SplitOptions
    split.builtinOptions = schema.SplitOptionsT()
    split.builtinOptions.numSplits = len(pieces)
    return split
