"""Integer-only TFLite (``quantize="int8"`` / ``"int16x8"``) of every layer kind.

Routes: a model over a sequence of static length has its loops unrolled
(every recurrent layer of the package, Keras' own, attention, a
Transformer block, a user's cell); a `streaming_model` fed one step has no
loop; with ``fuse_lstm=True`` each LSTM is TFLite's integer LSTM kernel
(int8 weights and activations, an int16 cell state), over any length, or
in 16x8 TFLite Micro's; a dynamic length is refused before the quantizer
runs; a crash of the quantizer or of LiteRT in the child process is one
error line. Each integer model is compared with Keras on held-out inputs,
in LiteRT without its default delegates and, where it runs them, in
TensorFlow Lite for Microcontrollers, and its ops are checked to compute
in integers.
"""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from keras_seq import layers
from keras_seq.export import (
    convert_to_tflite,
    streaming_calibration,
    streaming_model,
    tflite_op_names,
)
from keras_seq.export.integer_tflite import float_ops

micro = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")

pytestmark = [pytest.mark.tensorflow_only, pytest.mark.slow]

T, F, U = 6, 5, 6


class MGUCell(layers.RecurrentCell):
    """A user's minimal gated unit, in keras.ops only."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units, self.state_size = units, [units]

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], 2 * self.units), name="kernel")
        self.recurrent_kernel = self.add_weight(shape=(self.units, 2 * self.units),
                                                name="recurrent_kernel")

    def project(self, sequence):
        return keras.ops.matmul(sequence, self.kernel)

    def step(self, inputs, states, training=False):
        (h,) = states
        xf, xc = keras.ops.split(inputs, 2, axis=-1)
        rf, rc = keras.ops.split(self.recurrent_kernel, 2, axis=-1)
        f = keras.ops.sigmoid(xf + keras.ops.matmul(h, rf))
        c = keras.ops.tanh(xc + keras.ops.matmul(f * h, rc))
        h = (1.0 - f) * h + f * c
        return h, [h]


def _attention(x):
    h = keras.layers.Dense(U)(x)
    return layers.MultiHeadAttention(num_heads=2, key_dim=3)(h, h)


# name -> the branch over the input x (B, T, F); each branch is one output.
BRANCHES = {
    "PeepholeLSTM": lambda x: layers.PeepholeLSTM(U, return_sequences=True)(x),
    "CoupledGateLSTM": lambda x: layers.CoupledGateLSTM(U, return_sequences=True)(x),
    "GRU": lambda x: layers.GRU(U, return_sequences=True)(x),
    "LayerNormLSTM": lambda x: layers.LayerNormLSTM(U, return_sequences=True)(x),
    "ConvertibleSimpleRNN": lambda x: layers.ConvertibleSimpleRNN(U, return_sequences=True)(x),
    "NTM": lambda x: layers.NTM(U, memory_size=6, memory_width=3, return_sequences=True)(x),
    "MinGRU": lambda x: layers.MinGRU(U, return_sequences=True)(x),
    "MinLSTM": lambda x: layers.MinLSTM(U, return_sequences=True)(x),
    "RGLRU": lambda x: layers.RGLRU(U, return_sequences=True)(keras.layers.Dense(U)(x)),
    "user cell (RNN)": lambda x: layers.RNN(MGUCell(U), return_sequences=True)(x),
    "keras LSTM": lambda x: keras.layers.LSTM(U, return_sequences=True)(x),
    "keras GRU": lambda x: keras.layers.GRU(U, return_sequences=True)(x),
    "keras SimpleRNN": lambda x: keras.layers.SimpleRNN(U, return_sequences=True)(x),
    "keras Bidirectional(LSTM)": lambda x: keras.layers.Bidirectional(
        keras.layers.LSTM(U // 2, return_sequences=True))(x),
    "MultiHeadAttention": _attention,
}
# The quantizer leaves ops of these in float (the negation inside Keras'
# LayerNormalization; sLSTM's stabiliser sums), which the export makes integer.
MENDED = {
    "SLSTM": lambda x: layers.SLSTM(U, return_sequences=True)(x),
    "TransformerEncoder": lambda x: layers.TransformerEncoder(
        num_heads=2, intermediate_dim=8)(keras.layers.Dense(U)(x)),
}


def _runner(flatbuffer):
    return Interpreter(model_content=flatbuffer, experimental_op_resolver_type=(
        OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)).get_signature_runner()


def _micro_runner(flatbuffer):
    """TFLite Micro, the microcontrollers' runtime, called as `_runner` is
    (its inputs and outputs by their signature names)."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(flatbuffer, 0))
    graph, signature = model.subgraphs[0], model.signatureDefs[0]
    inputs = {m.name.decode(): list(graph.inputs).index(m.tensorIndex) for m in signature.inputs}
    outputs = {m.name.decode(): list(graph.outputs).index(m.tensorIndex)
               for m in signature.outputs}
    interpreter = micro.Interpreter.from_bytes(flatbuffer)

    def run(**feeds):
        for name, value in feeds.items():
            interpreter.set_input(value, inputs[name])
        interpreter.invoke()
        return {name: interpreter.get_output(i) for name, i in outputs.items()}

    return run


def _all_ops(flatbuffer):
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(flatbuffer, 0)
    for g in range(model.SubgraphsLength()):
        for o in range(model.Subgraphs(g).OperatorsLength()):
            yield model.Subgraphs(g).Operators(o)


def _tensor_types(flatbuffer) -> set[str]:
    from ai_edge_litert import schema_py_generated as schema

    names = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    model = schema.Model.GetRootAs(flatbuffer, 0)
    graph = model.Subgraphs(0)
    return {names[graph.Tensors(i).Type()] for i in range(graph.TensorsLength())}


def _constants(flatbuffer) -> list[tuple]:
    """Each constant tensor's (subgraph, bytes, shape, scales)."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(flatbuffer, 0))
    found = []
    for g, subgraph in enumerate(model.subgraphs):
        for tensor in subgraph.tensors:
            data = model.buffers[tensor.buffer].data
            if data is not None and len(data):
                q = tensor.quantization
                scales = () if q is None or q.scale is None else tuple(q.scale.tolist())
                shape = tuple(np.asarray(tensor.shape).tolist())
                found.append((g, bytes(np.asarray(data, np.uint8)), shape, scales))
    return found


def _stored_constants(flatbuffer) -> list[bytes]:
    """The bytes of each buffer that holds data."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(flatbuffer, 0))
    return [bytes(np.asarray(b.data, np.uint8)) for b in model.buffers
            if b.data is not None and len(b.data)]


def _named_tensors(flatbuffer) -> int:
    from ai_edge_litert import schema_py_generated as schema

    graph = schema.Model.GetRootAs(flatbuffer, 0).Subgraphs(0)
    return sum(graph.Tensors(i).Name() is not None for i in range(graph.TensorsLength()))


def _int8_tolerance(reference):
    """One int8 scale step per layer adds up; 10% of the output's range, plus 0.05."""
    return 0.1 * float(np.abs(reference).max()) + 0.05


def _branches(branches):
    keras.utils.set_random_seed(0)
    x = keras.Input((None, F), name="x")
    outputs = [keras.layers.Dense(2, name=f"head_{i}")(make(x))
               for i, make in enumerate(branches.values())]
    return keras.Model(x, outputs)


@pytest.fixture(scope="module")
def branches_model():
    return _branches(BRANCHES)


def _assert_close_to_keras(flatbuffer, model, names, runner=None):
    runner = runner or _runner(flatbuffer)
    for x in _sequences(3, 1):
        got = runner(x=x)
        got = [got[f"output_{i}"] for i in range(len(got))]
        references = model(x)
        for name, value, reference in zip(names, got, references):
            reference = np.asarray(reference)
            error = np.abs(value - reference).max()
            assert error <= _int8_tolerance(reference), (name, error)


def _sequences(n, seed):
    return np.random.default_rng(seed).normal(size=(n, 1, T, F)).astype("float32")


def _float_tensors_in_loops(flatbuffer) -> int:
    """Float tensors of the loops' condition and body subgraphs."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(flatbuffer, 0)
    return sum(model.Subgraphs(g).Tensors(i).Type() == schema.TensorType.FLOAT32
               for g in range(1, model.SubgraphsLength())
               for i in range(model.Subgraphs(g).TensorsLength()))


def test_every_layer_kind_converts_to_int8_with_its_loops_kept(branches_model):
    """int8 keeps each recurrent layer's loop (a WHILE over its static
    length), calibrated step by step and carrying integers: nothing in a
    loop is float, no op is left in float, and the outputs are Keras'
    within int8's tolerance."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no op left in float
        flatbuffer = convert_to_tflite(branches_model, quantize="int8",
                                       representative_data=list(_sequences(60, 0)))
    ops = tflite_op_names(flatbuffer)
    assert {"WHILE", "DYNAMIC_UPDATE_SLICE", "FULLY_CONNECTED"} <= ops, sorted(ops)
    assert _float_tensors_in_loops(flatbuffer) == 0
    # Every op an integer kernel: the gate-block splits the quantizer leaves
    # in float at times (not the same from run to run) are made integer.
    assert float_ops(flatbuffer) == []
    # Each weight is one tensor in its subgraph, and each constant's bytes
    # are stored once in the file (the loops repeat the main graph's).
    constants = _constants(flatbuffer)
    assert len(constants) == len(set(constants)), len(constants) - len(set(constants))
    stored = _stored_constants(flatbuffer)
    assert len(stored) == len(set(stored)), len(stored) - len(set(stored))
    # Only the inputs and outputs keep a name (not even an empty one).
    assert _named_tensors(flatbuffer) == 1 + len(BRANCHES)
    # The loops' subgraphs carry no names, and loops whose conditions are
    # the same (the same carried values: the Bidirectional's two
    # directions, and layers whose states are alike) share one subgraph:
    # 15 loops, 9 conditions.
    loops, conditions, names = _loop_subgraphs(flatbuffer)
    assert (loops, conditions, names) == (15, 9, 0)
    _assert_close_to_keras(flatbuffer, branches_model, list(BRANCHES))
    # TFLite Micro runs it too, loops and all (its EXP, LOG and SQRT as tables).
    _assert_close_to_keras(flatbuffer, branches_model, list(BRANCHES),
                           _micro_runner(flatbuffer))


def _loop_subgraphs(flatbuffer) -> tuple[int, int, int]:
    """(loops, distinct condition subgraphs, names in any other subgraph
    than the main one); the file has no subgraph but the main one, the
    loops' bodies and their conditions."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(flatbuffer, 0))
    loops = [op.builtinOptions for g in model.subgraphs for op in g.operators
             if max(model.operatorCodes[op.opcodeIndex].builtinCode,
                    model.operatorCodes[op.opcodeIndex].deprecatedBuiltinCode)
             == schema.BuiltinOperator.WHILE]
    conditions = {o.condSubgraphIndex for o in loops}
    assert len(model.subgraphs) == 1 + len(conditions) + len(loops)
    names = sum((g.name is not None) + sum(t.name is not None for t in g.tensors)
                for g in model.subgraphs[1:])
    return len(loops), len(conditions), names


def test_every_layer_kind_converts_to_int16x8_with_its_loops_unrolled(branches_model):
    """16x8: int16 activations, int8 weights, within int8's tolerance (the
    weights round alike; measured 0.03-0.5 of it, LayerNormLSTM's norms the
    most). Without the mends of what its quantizer gets wrong: constants
    the converter shares made a file LiteRT refuses (a buffer quantized for
    one reader, read by another), a zero state at scale 0 made it abort,
    and MinGRU's select, copying raw values of two scales, was 4.8x the
    tolerance off."""
    with pytest.warns(UserWarning, match=r"left ops in float.*\(DIV x6, SQRT x12\)"):
        flatbuffer = convert_to_tflite(branches_model, quantize="int16x8",
                                       representative_data=list(_sequences(60, 0)))
    assert "WHILE" not in tflite_op_names(flatbuffer)
    assert {"INT16", "INT8", "INT64"} <= _tensor_types(flatbuffer)  # activations, weights, biases
    # The NTM's cosine similarity: LiteRT has no int16 DIV or SQRT kernel.
    assert sorted(set(float_ops(flatbuffer))) == ["DIV", "SQRT"]
    _assert_close_to_keras(flatbuffer, branches_model, list(BRANCHES))


def test_int16x8_sums_keep_their_calibrated_range():
    """TensorFlow's 16x8 quantizer keeps a SUM at its input's scale and
    LiteRT's int16 SUM does not rescale: a sum over time came out 1.76 off
    on 5.36 (clipped); it is a MEAN into the calibrated range, times the
    count, over any axes."""
    keras.utils.set_random_seed(0)
    x = keras.Input((None, F), name="x")
    h = keras.layers.Dense(U)(x)
    sums = ["over time", "over features"]
    model = keras.Model(x, [keras.layers.Lambda(lambda v: keras.ops.sum(v, axis=1))(h),
                            keras.layers.Lambda(lambda v: keras.ops.sum(v, axis=2))(h)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no op left in float
        flatbuffer = convert_to_tflite(model, quantize="int16x8",
                                       representative_data=list(_sequences(60, 0)))
    runner = _runner(flatbuffer)
    for x in _sequences(3, 1):
        got = runner(x=x)
        for i, reference in enumerate(model(x)):
            reference = np.asarray(reference)
            tolerance = 0.05 * float(np.abs(reference).max()) + 0.025
            assert np.abs(got[f"output_{i}"] - reference).max() <= tolerance, sums[i]
    assert "SUM" not in tflite_op_names(flatbuffer) and float_ops(flatbuffer) == []


def test_negations_and_sums_the_quantizer_leaves_in_float_are_made_integer():
    model = _branches(MENDED)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no op left in float, no warning
        flatbuffer = convert_to_tflite(model, quantize="int8",
                                       representative_data=list(_sequences(60, 0)))
    assert float_ops(flatbuffer) == []
    _assert_close_to_keras(flatbuffer, model, list(MENDED))


def test_ops_the_quantizer_leaves_in_float_are_named_in_a_warning():
    sine = {"sin": lambda x: keras.layers.Lambda(keras.ops.sin)(keras.layers.Dense(U)(x))}
    model = _branches(sine)
    with pytest.warns(UserWarning, match=r"left ops in float.*SIN x1.*integer-only runtime"):
        flatbuffer = convert_to_tflite(model, quantize="int8",
                                       representative_data=list(_sequences(60, 0)))
    assert float_ops(flatbuffer) == ["SIN"]
    _assert_close_to_keras(flatbuffer, model, list(sine))


@pytest.mark.parametrize("quantize, share", [("int8", 0.1), ("int16x8", 0.05)])
def test_masked_attention_over_padded_ids_converts_to_integers(quantize, share):
    """A -1e9 mask fill would leave every kept logit one int8 value (uniform
    attention); the integer export fills just below the smallest kept one.

    16x8 takes token ids too, with what its quantizer gets wrong mended:
    the ids' range, an unrolled GRU's bias shared by every step (quantized
    for one step's input scale), the first step's zero state at scale 0
    (LiteRT aborts), Bahdanau's score ``SUM`` kept at its input's scale
    (clipped), and the mask's ``SELECT_V2``s left in float."""
    keras.utils.set_random_seed(7)
    ids = keras.Input((None,), dtype="int32", name="ids")
    h = keras.layers.Embedding(20, 8, mask_zero=True)(ids)
    h = layers.GRU(U, return_sequences=True)(h)
    h = layers.BahdanauAttention(U)(h, h)
    model = keras.Model(ids, keras.layers.Dense(3)(h))
    rng = np.random.default_rng(8)
    for weight in model.weights:  # scores far apart: attention that picks
        weight.assign(rng.normal(0.0, 1.0, weight.shape).astype("float32"))

    def padded(n):
        rows = np.zeros((n, 1, 9), np.int32)
        for row in rows:
            length = rng.integers(3, 10)
            row[0, :length] = rng.integers(1, 20, length)
        return list(rows)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the mask's CAST to float made a SELECT_V2 of integers
        flatbuffer = convert_to_tflite(model, quantize=quantize, representative_data=padded(60))
    assert float_ops(flatbuffer) == [] and "SELECT_V2" in tflite_op_names(flatbuffer)
    if quantize == "int16x8":
        assert "INT16" in _tensor_types(flatbuffer)
    for runner in (_runner(flatbuffer), _micro_runner(flatbuffer)):  # TFLite Micro too

        for x in padded(4):
            length = int((x != 0).sum())
            reference = np.asarray(model(x))[:, :length]
            got = runner(ids=x)["output_0"][:, :length]
            tolerance = share * float(np.abs(reference).max()) + share / 2
            assert np.abs(got - reference).max() <= tolerance, quantize


@pytest.mark.parametrize("quantize, share", [("int8", 0.1), ("int16x8", 0.05)])
def test_a_streaming_step_converts_to_integers_and_carries_its_states(quantize, share):
    """16x8 too, within half int8's tolerance (measured: 5% of a small
    output's range at worst: its int8 weights still round)."""
    keras.utils.set_random_seed(1)
    x = keras.Input((None, F))
    h = layers.PeepholeLSTM(U, return_sequences=True)(x)
    h = keras.layers.GRU(U, return_sequences=True)(h)
    model = keras.Model(x, keras.layers.Dense(3)(h))
    stream = streaming_model(model)
    examples = streaming_calibration(stream, _sequences(20, 2)[:, 0], max_examples=100)
    assert len(examples) == 100 and len(examples[0]) == 1 + 2 + 1
    assert np.abs(examples[7][1]).max() > 0  # states the stream reached, not zeros
    flatbuffer = convert_to_tflite(stream, quantize=quantize, representative_data=examples)
    assert float_ops(flatbuffer) == [] and "WHILE" not in tflite_op_names(flatbuffer)
    names = [t.name for t in stream.inputs]
    sequence = _sequences(1, 3)[0]
    reference = np.asarray(model(sequence))[0]
    for runner in (_runner(flatbuffer), _micro_runner(flatbuffer)):  # TFLite Micro too
        states = [np.zeros((1, U), "float32")] * 3
        for t in range(T):
            out = runner(**dict(zip(names, [sequence[:, t:t + 1], *states])))
            out = [out[f"output_{i}"] for i in range(len(out))]
            states = out[1:]
            tolerance = share * float(np.abs(reference).max()) + share / 2
            assert np.abs(out[0][0, 0] - reference[t]).max() <= tolerance, (quantize, t)


def test_a_crash_in_the_child_is_one_error_and_this_process_goes_on(monkeypatch):
    """Calibrated on zeros alone, every range is empty and LiteRT aborts
    preparing the model (refused before the child runs; let through here)."""
    from keras_seq.export import tflite_export

    monkeypatch.setattr(tflite_export, "calibration_examples",
                        lambda where, data, specs: [[np.zeros((1, T, F), "float32")]])
    keras.utils.set_random_seed(3)
    x = keras.Input((None, F), name="x")
    model = keras.Model(x, layers.GRU(U)(x))
    with pytest.raises(ValueError, match=r'int8.*crashed \((signal \d+|exit status -?\d+)\) on '
                                         r"this model; the model was not converted"):
        convert_to_tflite(model, quantize="int8", representative_data="ignored")
    assert np.isfinite(np.asarray(model(_sequences(1, 7)[0]))).all()


@tf.function(input_signature=[tf.TensorSpec((1, F), name="x")])
def _running_sum(x):
    return tf.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s + x), (0, x))[1]


def test_a_loop_body_is_calibrated_over_every_iteration():
    """The calibration reads a loop body's tensors at each iteration: the
    running sum's ADD in the body takes 2x, 3x and 4x over three
    iterations, so its range is theirs over the examples (TensorFlow's
    calibrator crashes on this loop)."""
    from ai_edge_litert import schema_py_generated as schema

    from keras_seq.export._loop_calibration import calibrated

    signature = [tf.TensorSpec((1, F), name="x")]
    flatbuffer = convert_to_tflite(_running_sum, input_signature=signature)
    examples = [[x] for x in _sequences(5, 2)[:, 0, :1]]
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(calibrated(flatbuffer, examples), 0))
    add = schema.BuiltinOperator.ADD
    ranges = [
        (float(g.tensors[op.outputs[0]].quantization.min[0]),
         float(g.tensors[op.outputs[0]].quantization.max[0]))
        for g in model.subgraphs[1:] for op in g.operators
        if model.operatorCodes[op.opcodeIndex].builtinCode == add
        and g.tensors[op.outputs[0]].type == schema.TensorType.FLOAT32
    ]
    sums = np.stack([k * x[0] for x in examples for k in (2, 3, 4)])
    np.testing.assert_allclose(ranges, [(sums.min(), sums.max())], rtol=1e-6)


def test_a_loop_of_ones_own_converts_to_int8_and_is_refused_before_the_16x8_quantizer():
    """int8 keeps any loop (here a function's own, x + x + x + x); 16x8
    unrolls the package's loops and refuses one it cannot, in one line."""
    examples = list(_sequences(20, 0)[:, 0, :1])
    signature = [tf.TensorSpec((1, F), name="x")]
    flatbuffer = convert_to_tflite(_running_sum, input_signature=signature, quantize="int8",
                                   representative_data=examples)
    assert "WHILE" in tflite_op_names(flatbuffer) and float_ops(flatbuffer) == []
    assert _float_tensors_in_loops(flatbuffer) == 0
    x = _sequences(1, 3)[0, 0, :1]
    got = _runner(flatbuffer)(x=x)["output_0"]
    assert np.abs(got - 4 * x).max() <= _int8_tolerance(4 * x)
    with pytest.raises(ValueError, match="graph without loops.*1 over a dynamic length"):
        convert_to_tflite(_running_sum, input_signature=signature, quantize="int16x8",
                          representative_data=examples)


FUSED = {
    "peephole_lstm": lambda x: layers.PeepholeLSTM(U, return_sequences=True)(x),
    "cifg_peepholes": lambda x: layers.CoupledGateLSTM(
        U, use_peepholes=True, return_sequences=True)(x),
    "keras_lstm_backwards": lambda x: keras.layers.LSTM(U, go_backwards=True)(x),
    "bidirectional": lambda x: keras.layers.Bidirectional(
        keras.layers.LSTM(U, return_sequences=True))(x),
}


def test_the_fused_lstm_converts_to_int8_over_any_length():
    """TFLite's integer LSTM kernel: int8 weights and activations, int16
    peepholes and cell state, no loop; calibrated on length T, run on others,
    each invoke from a zero state."""
    model = _branches(FUSED)
    flatbuffer = convert_to_tflite(model, quantize="int8", fuse_lstm=True,
                                   representative_data=list(_sequences(60, 0)))
    ops = tflite_op_names(flatbuffer)
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in ops and "WHILE" not in ops, sorted(ops)
    assert float_ops(flatbuffer) == []
    assert _tensor_types(flatbuffer) >= {"INT8", "INT16"}
    fused = [op for op in _all_ops(flatbuffer) if op.InputsLength() == 24]
    assert len(fused) == 5, len(fused)  # one op per direction
    runner = _runner(flatbuffer)
    rng = np.random.default_rng(11)
    for length in (T + 5, T - 3, T + 5):
        x = rng.normal(size=(1, length, F)).astype("float32")
        got = runner(x=x)
        for i, (name, reference) in enumerate(zip(FUSED, model(x))):
            reference = np.asarray(reference)
            error = np.abs(got[f"output_{i}"] - reference).max()
            assert error <= _int8_tolerance(reference), (name, length, error)


def test_keras_fused_lstm_over_a_static_length_runs_in_tflite_micro():
    """TFLite Micro's LSTM kernel takes a plain LSTM (no peepholes, no CIFG)
    of static shapes: Keras' LSTM, given a static input signature. Each
    invoke starts from a zero state: TFLite Micro's FILL has no int16, so
    the int16 cell state is zeroed by a CAST of int8 zeros."""
    keras.utils.set_random_seed(0)
    x = keras.Input((None, F), name="x")
    model = keras.Model(x, keras.layers.Dense(2)(keras.layers.LSTM(U, return_sequences=True)(x)))
    flatbuffer = convert_to_tflite(model, quantize="int8", fuse_lstm=True,
                                   input_signature=[tf.TensorSpec((1, T, F), name="x")],
                                   representative_data=list(_sequences(60, 0)))
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in tflite_op_names(flatbuffer)
    runner = _micro_runner(flatbuffer)
    for x in _sequences(3, 1):  # one interpreter, invoked again and again
        reference = np.asarray(model(x))
        error = np.abs(runner(x=x)["output_0"] - reference).max()
        assert error <= _int8_tolerance(reference), error


def test_a_plain_lstm_fuses_to_tflite_micros_16x8_kernel():
    """16x8 fused: TFLite Micro's LSTM kernel (int16 activations and cell
    state, int8 weights, int64 biases), which LiteRT lacks, over the
    examples' static length: Keras' LSTM forwards, backwards and in a
    Bidirectional. Measured 0.2-0.6% of each output's range off; with the
    gate biases the quantizer writes (int32, read as int64 by the kernel)
    250%."""
    keras.utils.set_random_seed(0)
    x = keras.Input((None, F), name="x")
    model = keras.Model(x, [
        keras.layers.Dense(2)(keras.layers.LSTM(U, return_sequences=True)(x)),
        keras.layers.Bidirectional(keras.layers.LSTM(U, return_sequences=True))(x),
        keras.layers.LSTM(U, go_backwards=True)(x)])
    flatbuffer = convert_to_tflite(model, quantize="int16x8", fuse_lstm=True,
                                   representative_data=list(_sequences(60, 0)))
    fused = [op for op in _all_ops(flatbuffer) if op.InputsLength() == 24]
    assert len(fused) == 4 and "WHILE" not in tflite_op_names(flatbuffer)
    assert float_ops(flatbuffer) == [] and _tensor_types(flatbuffer) >= {"INT16", "INT64"}
    runner = _micro_runner(flatbuffer)
    for x in _sequences(3, 1):
        got = runner(x=x)
        for i, reference in enumerate(model(x)):
            reference = np.asarray(reference)
            error = np.abs(got[f"output_{i}"] - reference).max()
            assert error <= 0.02 * np.abs(reference).max(), (i, error)


def test_a_16x8_fused_lstm_takes_and_gives_int16_with_integer_io():
    keras.utils.set_random_seed(0)
    x = keras.Input((None, F), name="x")
    model = keras.Model(x, keras.layers.LSTM(U, return_sequences=True)(x))
    flatbuffer = convert_to_tflite(model, quantize="int16x8", fuse_lstm=True, integer_io=True,
                                   representative_data=list(_sequences(30, 0)))
    from ai_edge_litert import schema_py_generated as schema

    graph = schema.ModelT.InitFromObj(schema.Model.GetRootAs(flatbuffer, 0)).subgraphs[0]
    given, taken = graph.tensors[graph.inputs[0]], graph.tensors[graph.outputs[0]]
    assert given.type == taken.type == schema.TensorType.INT16  # LiteRT cannot load it
    scale_in, scale_out = float(given.quantization.scale[0]), float(taken.quantization.scale[0])
    x = _sequences(1, 3)[0]
    got = _micro_runner(flatbuffer)(x=np.round(x / scale_in).astype(np.int16))["output_0"]
    reference = np.asarray(model(x))
    error = np.abs(got * scale_out - reference).max()
    assert error <= 0.02 * np.abs(reference).max(), error


def test_peepholes_are_refused_in_a_16x8_fused_lstm():
    """TFLite Micro's 16x8 kernel computes a plain LSTM (LiteRT has none)."""
    x = keras.Input((None, F), name="x")
    model = keras.Model(x, layers.PeepholeLSTM(U)(x))
    with pytest.raises(ValueError, match=r"PeepholeLSTM '.*' has peepholes.*plain LSTM"):
        convert_to_tflite(model, quantize="int16x8", fuse_lstm=True,
                          representative_data=list(_sequences(4, 0)))


def test_a_16x8_fused_lstm_without_tflite_micro_is_an_import_error_first(monkeypatch):
    """Its one check runs in TFLite Micro: without the package, nothing is
    converted."""
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *rest: None if name == "tflite_micro" else found(name, *rest))
    x = keras.Input((None, F), name="x")
    model = keras.Model(x, keras.layers.LSTM(U)(x))
    with pytest.raises(ImportError, match=r"pip install tflite-micro"):
        convert_to_tflite(model, quantize="int16x8", fuse_lstm=True,
                          representative_data=list(_sequences(4, 0)))


def test_a_fused_bidirectional_lstm_keeps_each_direction_in_its_own_scale():
    """Each op writes h in one scale, reads it back as h(t-1) and copies it
    out; the CONCATENATION of the two directions must not give the forward
    op's output a scale its state does not have (13% error where it did)."""
    keras.utils.set_random_seed(0)
    x = keras.Input((None, F), name="x")
    model = keras.Model(x, keras.layers.Bidirectional(
        keras.layers.LSTM(U, return_sequences=True))(x))
    flatbuffer = convert_to_tflite(model, quantize="int8", fuse_lstm=True,
                                   representative_data=list(_sequences(60, 0)))
    x = _sequences(1, 12)[0]
    reference = np.asarray(model(x))
    error = np.abs(_runner(flatbuffer)(x=x)["output_0"] - reference)
    # One int8 step of the output is 0.4% of its range; each half within 2%.
    for half in (error[..., :U], error[..., U:]):
        assert half.max() <= 0.02 * np.abs(reference).max(), half.max()


@pytest.fixture(scope="module")
def small_model():
    x = keras.Input((None, F), name="x")
    return keras.Model(x, layers.GRU(U)(x))


@pytest.mark.parametrize("kwargs, message", [
    ({"quantize": "int8"}, "give `representative_data`"),
    ({"quantize": "dynamic", "representative_data": [np.zeros((1, T, F))]},
     "calibrates integer models"),
    ({"quantize": "int16x8", "representative_data": [np.ones((1, T, F)), np.zeros((1, T, F))],
      "fuse_lstm": True}, r'"int16x8" with fuse_lstm=True: the model keeps loops \(1 WHILE op\)'),
    ({"quantize": "int8", "representative_data": [np.ones((1, T, F)), np.zeros((1, T + 1, F))]},
     r"differ in axis 1 \(6 to 7\)"),
    ({"quantize": "int8", "representative_data": [np.zeros((1, T, F + 1))]},
     r"has shape \(1, 6, 6\); expected \(None, None, 5\)"),
    ({"quantize": "int8", "representative_data": [np.full((1, T, F), np.nan)]},
     "finite numbers"),
    ({"quantize": "int8", "representative_data": []}, "no examples"),
    ({"quantize": "int8", "representative_data": [np.zeros((1, T, F))] * 3},
     r"every `representative_data` value of input 'x' is 0.0.*give real inputs"),
    ({"quantize": "int4"}, "quantize"),
])
def test_bad_integer_arguments_fail_before_the_quantizer(small_model, kwargs, message):
    with pytest.raises(ValueError, match=message):
        convert_to_tflite(small_model, **kwargs)


def test_a_loop_left_beside_the_fused_lstm_is_refused(small_model):
    with pytest.raises(ValueError, match=r"keeps loops \(\d WHILE ops?\).*GRU.*crashes on loops.*fuse_lstm=False"):
        convert_to_tflite(small_model, quantize="int8", fuse_lstm=True,
                          representative_data=list(_sequences(3, 0)))


def test_representative_data_of_the_wrong_type_is_a_type_error(small_model):
    with pytest.raises(TypeError, match="`representative_data` must be an iterable"):
        convert_to_tflite(small_model, quantize="int8", representative_data=3)


@pytest.mark.parametrize("quantize, dtype", [("int8", np.int8), ("int16x8", np.int16)])
def test_integer_io_takes_and_gives_integers_with_their_scales(small_model, quantize, dtype):
    data = list(_sequences(40, 9))
    flatbuffer = convert_to_tflite(small_model, quantize=quantize, representative_data=data,
                                   integer_io=True)
    interpreter = Interpreter(model_content=flatbuffer, experimental_op_resolver_type=(
        OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
    interpreter.allocate_tensors()
    (given,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    assert given["dtype"] == dtype and out["dtype"] == dtype
    x = _sequences(1, 10)[0]
    scale, zero = given["quantization"]
    bounds = np.iinfo(dtype)
    interpreter.set_tensor(given["index"], np.clip(np.round(x / scale + zero), bounds.min,
                                                   bounds.max).astype(dtype))
    interpreter.invoke()
    scale, zero = out["quantization"]
    got = (interpreter.get_tensor(out["index"]).astype(np.float32) - zero) * scale
    reference = np.asarray(small_model(x))
    assert np.abs(got - reference).max() <= _int8_tolerance(reference)
    with pytest.raises(ValueError, match="integer_io=True` needs"):
        convert_to_tflite(small_model, integer_io=True)
