"""The rewrites that let TFLite Micro run the integer files (`_portable_ops`).

Each case is a one-op model written by hand. The reference is LiteRT's
own kernel for the original op: the rewritten model gives its outputs in
LiteRT and in TFLite Micro, which refuses the original op. No TensorFlow
conversion runs here.
"""

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from keras_seq.export._flatbuffer import add_tensor, new_operator, pack_model
from keras_seq.export._portable_ops import int8_table, portable
from keras_seq.export.tflite_export import tflite_op_names

micro = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")

pytestmark = pytest.mark.tensorflow_only

INT8, INT16, INT32, BOOL = (schema.TensorType.INT8, schema.TensorType.INT16,
                            schema.TensorType.INT32, schema.TensorType.BOOL)
_NUMPY = {INT8: np.int8, INT16: np.int16, INT32: np.int32, BOOL: np.bool_}


def _quantization(scale, zero_point):
    q = schema.QuantizationParametersT()
    q.scale, q.zeroPoint = [scale], [zero_point]
    return q


def _one_op_model(op_name, inputs, output, options=None):
    """A model of one builtin op. ``inputs``: (shape, type, quantization,
    constant value or None for a model input); ``output``: (shape, type,
    quantization)."""
    model = schema.ModelT()
    model.version, model.operatorCodes, model.buffers = 3, [], [schema.BufferT()]
    graph = schema.SubGraphT()
    graph.tensors, graph.operators = [], []
    model.subgraphs = [graph]
    indices, model_inputs = [], []
    for shape, kind, quantization, value in inputs:
        array = (np.zeros(shape, _NUMPY[kind]) if value is None
                 else np.asarray(value, _NUMPY[kind]).reshape(shape))
        index = add_tensor(model, graph, array, kind, f"in{len(indices)}", quantization)
        if value is None:  # a model input: no data
            graph.tensors[index].buffer = 0
            model_inputs.append(index)
        indices.append(index)
    shape, kind, quantization = output
    out = add_tensor(model, graph, np.zeros(shape, _NUMPY[kind]), kind, "out", quantization)
    graph.tensors[out].buffer = 0
    op = new_operator(model, getattr(schema.BuiltinOperator, op_name), indices, [out])
    if options is not None:
        op.builtinOptionsType, op.builtinOptions = options
    graph.operators.append(op)
    graph.inputs, graph.outputs = np.array(model_inputs, np.int32), np.array([out], np.int32)
    return pack_model(model)


def _litert(flatbuffer, feeds):
    interpreter = Interpreter(model_content=flatbuffer, experimental_op_resolver_type=(
        OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), feeds):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


def _micro(flatbuffer, feeds):
    interpreter = micro.Interpreter.from_bytes(flatbuffer)
    for i, value in enumerate(feeds):
        interpreter.set_input(value, i)
    interpreter.invoke()
    return interpreter.get_output(0)


CODES = np.arange(-128, 128, dtype=np.int8)
rng = np.random.default_rng(0)
_reducer = schema.ReducerOptionsT()
_reducer.keepDims = False
_tanh_gelu = schema.GeluOptionsT()
_tanh_gelu.approximate = True

# name -> (op, inputs, output, options, feeds)
CASES = {
    "int8 EXP": ("EXP", [((256,), INT8, _quantization(0.03, 40), None)],
                 ((256,), INT8, _quantization(0.02, -128)), None, [CODES]),
    "int8 LOG": ("LOG", [((256,), INT8, _quantization(0.05, -128), None)],
                 ((256,), INT8, _quantization(0.04, 20)), None, [CODES]),
    "int8 GELU": ("GELU", [((256,), INT8, _quantization(0.03, 10), None)],
                  ((256,), INT8, _quantization(0.025, -100)), None, [CODES]),
    "int8 GELU, tanh": ("GELU", [((256,), INT8, _quantization(0.03, 10), None)],
                        ((256,), INT8, _quantization(0.025, -100)),
                        (schema.BuiltinOptions.GeluOptions, _tanh_gelu), [CODES]),
    "SELECT": ("SELECT", [((2, 3), BOOL, None, None), ((2, 3), INT8, _quantization(0.1, 3), None),
                          ((2, 3), INT8, _quantization(0.1, 3), None)],
               ((2, 3), INT8, _quantization(0.1, 3)), None,
               [rng.random((2, 3)) > 0.5, CODES[:6].reshape(2, 3), CODES[-6:].reshape(2, 3)]),
    "int16 GREATER_EQUAL": ("GREATER_EQUAL", [((5,), INT16, _quantization(0.01, 0), None),
                                              ((), INT16, _quantization(0.01, 0), [7])],
                            ((5,), BOOL, None), None,
                            [np.array([-300, 6, 7, 8, 3000], np.int16)]),
    "int16 FILL": ("FILL", [((2,), INT32, None, [1, 6]), ((), INT16, _quantization(0.01, 0), [0])],
                   ((1, 6), INT16, _quantization(0.01, 0)), None, []),
    "int32 SELECT_V2": ("SELECT_V2", [((2, 3), BOOL, None, None), ((2, 3), INT32, None, None),
                                      ((), INT32, None, [0])],
                        ((2, 3), INT32, None), None,
                        [rng.random((2, 3)) > 0.5,
                         np.array([[-5, 1 << 30, 3], [4, -(1 << 30), 6]], np.int32)]),
    "bool GATHER": ("GATHER", [((5,), BOOL, None, None), ((3,), INT32, None, [4, 0, 2])],
                    ((3,), BOOL, None), None, [np.array([True, False, True, False, False])]),
    "int16 GATHER": ("GATHER", [((5, 3), INT16, _quantization(0.001, 0),
                                  [-32768, 32767, 0, -1, 1, 255, 256, -256, -257, 32639, 32640,
                                   -129, 128, 127, -128]),
                                 ((1, 4), INT32, None, None)],
                     ((1, 4, 3), INT16, _quantization(0.001, 0)), None,
                     [np.array([[4, 0, 2, 3]], np.int32)]),
    "int16 REDUCE_MAX": ("REDUCE_MAX", [((2, 5, 3), INT16, _quantization(0.01, 0), None),
                                         ((1,), INT32, None, [-2])],
                         ((2, 3), INT16, _quantization(0.01, 0)),
                         (schema.BuiltinOptions.ReducerOptions, _reducer),
                         [rng.integers(-32768, 32768, (2, 5, 3)).astype(np.int16)]),
    "int16 REDUCE_MIN, every axis": ("REDUCE_MIN", [((1, 4, 3), INT16, _quantization(0.01, 0), None),
                                                     ((3,), INT32, None, [0, 1, 2])],
                                     ((), INT16, _quantization(0.01, 0)),
                                     (schema.BuiltinOptions.ReducerOptions, _reducer),
                                     [rng.integers(-32768, 32768, (1, 4, 3)).astype(np.int16)]),
    "REDUCE_ANY": ("REDUCE_ANY", [((3, 4), BOOL, None, None), ((1,), INT32, None, [1])],
                   ((3,), BOOL, None), (schema.BuiltinOptions.ReducerOptions, _reducer),
                   [np.array([[0, 0, 0, 0], [0, 1, 0, 0], [1, 1, 1, 1]], bool)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_rewritten_op_gives_litert_kernels_outputs_in_tflite_micro(name):
    op, inputs, output, options, feeds = CASES[name]
    original = _one_op_model(op, inputs, output, options)
    with pytest.raises(RuntimeError):  # why the rewrite exists
        _micro(original, feeds)
    rewritten = portable(original)
    reference = _litert(original, feeds)
    np.testing.assert_array_equal(_litert(rewritten, feeds), reference)
    np.testing.assert_array_equal(_micro(rewritten, feeds), reference)


def test_an_int8_sqrt_table_rounds_to_nearest_where_litert_truncates():
    """LiteRT's int8 SQRT kernel truncates (up to one code low); the table
    holds the nearest code of the exact square root."""
    inputs = [((256,), INT8, _quantization(0.02, -128), None)]
    original = _one_op_model("SQRT", inputs, ((256,), INT8, _quantization(0.015, -128)))
    rewritten = portable(original)
    exact = np.sqrt(0.02 * (CODES.astype(np.float64) + 128)) / 0.015 - 128
    np.testing.assert_array_equal(_micro(rewritten, [CODES]),
                                  np.clip(np.floor(exact + 0.5), -128, 127))
    difference = _litert(rewritten, [CODES]).astype(int) - _litert(original, [CODES])
    assert set(np.unique(difference)) <= {0, 1} and difference.sum() > 0


def test_a_table_of_a_function_that_is_not_a_number_gives_the_lowest_code():
    """The log of a negative: LiteRT's table holds -128 there too."""
    table = int8_table(np.log, 0.05, 0, 0.04, 0)
    assert (table[:128] == -128).all() and table[129] > -128


def test_a_rank_1_select_which_picks_rows_is_left_as_it_is():
    """SELECT with a rank-1 condition picks rows; SELECT_V2 would broadcast
    it along the last axis instead."""
    q = _quantization(0.1, 0)
    original = _one_op_model("SELECT", [((2,), BOOL, None, None), ((2, 2), INT8, q, None),
                                        ((2, 2), INT8, q, None)], ((2, 2), INT8, q))
    assert "SELECT" in tflite_op_names(portable(original))
