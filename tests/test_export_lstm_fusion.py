"""TFLite's fused LSTM kernel for PeepholeLSTM, CoupledGateLSTM and keras.layers.LSTM:
op lists, parity with Keras (|c| > 10, repeated invokes), the flatbuffer edits,
quantization and the layers that keep their loop."""

import keras
import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.interpreter import Interpreter

from keras_seq import layers
from keras_seq.export import convert_to_tflite, run_tflite, tflite_op_names
from keras_seq.export.lstm_fusion import _convert_with_lstm_functions, _traceable

pytestmark = pytest.mark.slow

FUSED = "UNIDIRECTIONAL_SEQUENCE_LSTM"
FEATURES, UNITS, LENGTH = 5, 8, 12


def _randomize(model, seed=0):
    """Weights (kernels, biases, peepholes) uniform in [-1, 1]: not small."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.uniform(-1.0, 1.0, weight.shape).astype("float32"))


def _model(layer, features=FEATURES):
    inputs = keras.Input((None, features))
    return keras.Model(inputs, layer(inputs))


def _invoke(flatbuffer, *xs):
    """Outputs of one interpreter invoked on each x in turn (allocated once)."""
    interpreter = Interpreter(model_content=flatbuffer)
    index = interpreter.get_input_details()[0]["index"]
    interpreter.resize_tensor_input(index, xs[0].shape, strict=False)
    interpreter.allocate_tensors()
    outputs = []
    for x in xs:
        interpreter.set_tensor(index, x)
        interpreter.invoke()
        outputs.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))
    return outputs


def _fused_ops(flatbuffer):
    """(inputs, options) of every fused LSTM op."""
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(flatbuffer, 0))
    ops = []
    for subgraph in model.subgraphs:
        for op in subgraph.operators:
            code = model.operatorCodes[op.opcodeIndex]
            if max(code.builtinCode, code.deprecatedBuiltinCode) == schema.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM:
                values = {}
                for i in op.inputs:
                    if i >= 0:
                        tensor = subgraph.tensors[i]
                        data = model.buffers[tensor.buffer].data
                        if data is not None and tensor.type == schema.TensorType.FLOAT32:
                            values[int(i)] = np.frombuffer(data.tobytes(), np.float32)
                ops.append(([int(i) for i in op.inputs], op.builtinOptions, values))
    return ops


def _unedited(model):
    """The converter's flatbuffer before the edit: a plain LSTM with cell clip 10."""
    flatbuffer, _ = _convert_with_lstm_functions(
        model, *_traceable("test", model, None, None), None)
    return flatbuffer


def _assert_matches_keras(flatbuffer, model, xs, atol=1e-6):
    for output, x in zip(_invoke(flatbuffer, *xs), xs):
        np.testing.assert_allclose(output, model(x).numpy(), rtol=1e-5, atol=atol)


LAYERS = {
    "peephole": lambda: layers.PeepholeLSTM(UNITS, return_sequences=True),
    "peephole_last_backwards": lambda: layers.PeepholeLSTM(UNITS, go_backwards=True),
    "cifg_peephole": lambda: layers.CoupledGateLSTM(UNITS, use_peepholes=True, return_sequences=True),
    "cifg_peephole_backwards": lambda: layers.CoupledGateLSTM(
        UNITS, use_peepholes=True, go_backwards=True, return_sequences=True
    ),
    "cifg": lambda: layers.CoupledGateLSTM(UNITS),
    "keras_lstm": lambda: keras.layers.LSTM(UNITS, return_sequences=True),
    "keras_lstm_last_backwards": lambda: keras.layers.LSTM(UNITS, go_backwards=True),
}


@pytest.mark.parametrize("kind", list(LAYERS))
def test_fused_layer_matches_keras_at_every_invoke(kind, rng):
    model = _model(LAYERS[kind]())
    _randomize(model)
    flatbuffer = convert_to_tflite(model, fuse_lstm=True)
    ops = tflite_op_names(flatbuffer)
    assert FUSED in ops and "WHILE" not in ops
    assert ("REVERSE_V2" in ops) == ("backwards" in kind)
    # Two invokes on one interpreter, the second with large inputs: each starts
    # from a zero state (no h or c carried over from the first).
    xs = [rng.normal(size=(1, LENGTH, FEATURES)).astype("float32") * scale for scale in (1, 10)]
    _assert_matches_keras(flatbuffer, model, xs)


def test_stack_bidirectional_and_nested_model_fuse_every_layer(rng):
    inner_inputs = keras.Input((None, 2 * UNITS))
    inner = keras.Model(
        inner_inputs, layers.CoupledGateLSTM(UNITS, return_sequences=True)(inner_inputs)
    )
    inputs = keras.Input((None, FEATURES))
    h = keras.layers.Bidirectional(layers.PeepholeLSTM(UNITS, return_sequences=True))(inputs)
    h = inner(h)
    h = keras.layers.LSTM(UNITS, return_sequences=True)(h)
    outputs = layers.CoupledGateLSTM(UNITS, use_peepholes=True)(h)
    model = keras.Model(inputs, outputs)
    _randomize(model)
    flatbuffer = convert_to_tflite(model, fuse_lstm=True)
    assert "WHILE" not in tflite_op_names(flatbuffer)
    assert len(_fused_ops(flatbuffer)) == 5  # two directions + three layers
    xs = [rng.normal(size=(1, LENGTH, FEATURES)).astype("float32") for _ in range(2)]
    _assert_matches_keras(flatbuffer, model, xs)


def test_subclasses_fuse_as_their_parents_and_a_redefined_step_keeps_its_loop(rng):
    """The kernel is found through the cell's operator form: a subclass that
    keeps the step inherits it; one that redefines the step keeps its loop."""

    class MyPeephole(layers.PeepholeLSTM):
        pass

    class HalvedCell(layers.CoupledGateLSTMCell):
        def step(self, inputs, states, training=False):
            h, (_, c) = super().step(inputs, states, training=training)
            return 0.5 * h, [0.5 * h, c]

    inputs = keras.Input((None, FEATURES))
    h = MyPeephole(UNITS, return_sequences=True)(inputs)
    outputs = layers.RNN(HalvedCell(UNITS))(h)
    model = keras.Model(inputs, outputs)
    _randomize(model)
    flatbuffer = convert_to_tflite(model, fuse_lstm=True)
    assert len(_fused_ops(flatbuffer)) == 1 and "WHILE" in tflite_op_names(flatbuffer)
    xs = [rng.normal(size=(1, LENGTH, FEATURES)).astype("float32") for _ in range(2)]
    _assert_matches_keras(flatbuffer, model, xs)


@pytest.mark.parametrize("kind", ["keras_lstm", "peephole"])
def test_cell_state_beyond_ten_is_not_clipped(kind, rng):
    length = 30
    config = {"units": UNITS, "return_sequences": True}
    layer = keras.layers.LSTM(**config) if kind == "keras_lstm" else layers.PeepholeLSTM(**config)
    model = _model(layer)
    _randomize(model)
    # Input and forget gates held open (bias 8) so that c integrates
    # g = tanh(z_c) = ±1: it climbs for 15 steps, then the input flips sign
    # and it comes back down. A cell clipped at 10 comes back further.
    bias = layer.cell.bias.numpy()
    bias[: 2 * UNITS] = 8.0
    layer.cell.bias.assign(bias)
    if kind == "peephole":
        for peephole in (layer.cell.input_peephole, layer.cell.forget_peephole):
            peephole.assign(np.abs(peephole.numpy()) * 0.1)
    direction = rng.normal(size=(FEATURES,)).astype("float32") * 3.0
    signs = np.where(np.arange(length) < length // 2, 1.0, -1.0).astype("float32")
    x = (signs[None, :, None] * direction[None, None, :]).astype("float32")

    state_model = _model(type(layer).from_config({**layer.get_config(), "return_state": True}))
    state_model.set_weights(model.get_weights())
    _, _, c = state_model(x[:, : length // 2])
    assert np.max(np.abs(c)) > 10.0

    flatbuffer = convert_to_tflite(model, fuse_lstm=True)
    # c climbs to ~15 and cancels back to ~0: float32 rounding of c (ulp(15) ~
    # 1e-6, over 30 steps) is what reaches h, in Keras and in TFLite alike.
    _assert_matches_keras(flatbuffer, model, [x], atol=1e-5)
    # The converter's own op (cell_clip=10) does not.
    (unedited,) = _invoke(_unedited(model), x)
    assert np.max(np.abs(unedited - model(x).numpy())) > 1e-2


@pytest.mark.parametrize("kind", ["peephole", "cifg_peephole", "cifg", "keras_lstm"])
def test_edit_sets_peepholes_cifg_and_no_clip_that_the_converter_leaves_out(kind, rng):
    model = _model(LAYERS[kind]())
    _randomize(model)
    cell = model.layers[-1].cell
    flatbuffer = convert_to_tflite(model, fuse_lstm=True)
    ((inputs, options, values),) = _fused_ops(flatbuffer)
    assert options.cellClip == 0.0
    peepholes = {
        "peephole": {9: "input_peephole", 10: "forget_peephole", 11: "output_peephole"},
        "cifg_peephole": {10: "forget_peephole", 11: "output_peephole"},
    }.get(kind, {})
    for index in (9, 10, 11):
        if index in peepholes:
            weight = getattr(cell, peepholes[index])
            np.testing.assert_array_equal(values[inputs[index]], weight.numpy())
        else:
            assert inputs[index] == -1
    cifg = kind.startswith("cifg")
    for index in (1, 5, 12):  # input_to_input, recurrent_to_input, input_gate_bias
        assert (inputs[index] == -1) == cifg

    # The unedited conversion computes a plain LSTM and keeps its state
    # between invokes; the edited one computes the layer, from zero each time.
    xs = [rng.normal(size=(1, LENGTH, FEATURES)).astype("float32") for _ in range(2)]
    expected = [model(x).numpy() for x in xs]
    unedited = _invoke(_unedited(model), *xs)
    if kind != "keras_lstm":
        assert np.max(np.abs(unedited[0] - expected[0])) > 1e-2
    assert np.max(np.abs(unedited[1] - expected[1])) > 1e-2
    _assert_matches_keras(flatbuffer, model, xs)


@pytest.mark.parametrize("case", ["mask", "return_state"])
def test_layer_the_kernel_cannot_express_keeps_its_loop_with_a_warning(case, rng):
    inputs = keras.Input((None, FEATURES))
    if case == "mask":
        outputs = layers.PeepholeLSTM(UNITS, name="masked_lstm")(keras.layers.Masking()(inputs))
        match = "masked_lstm.*mask"
    else:
        outputs = layers.CoupledGateLSTM(UNITS, return_state=True, name="stateful_output")(inputs)
        match = "stateful_output.*return_state"
    model = keras.Model(inputs, outputs)
    _randomize(model)
    with pytest.warns(UserWarning, match=match):
        flatbuffer = convert_to_tflite(model, fuse_lstm=True)
    ops = tflite_op_names(flatbuffer)
    assert "WHILE" in ops and FUSED not in ops
    x = rng.normal(size=(1, LENGTH, FEATURES)).astype("float32")
    x[:, LENGTH - 3 :] = 0.0  # padding, masked by Masking
    interpreter = Interpreter(model_content=flatbuffer)
    index = interpreter.get_input_details()[0]["index"]
    interpreter.resize_tensor_input(index, x.shape, strict=False)
    interpreter.allocate_tensors()
    interpreter.set_tensor(index, x)
    interpreter.invoke()
    expected = model(x)
    expected = expected if isinstance(expected, (list, tuple)) else [expected]
    for detail, want in zip(interpreter.get_output_details(), expected):
        np.testing.assert_allclose(interpreter.get_tensor(detail["index"]), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("quantize", ["dynamic", "float16"])
def test_quantized_fused_model_keeps_its_peepholes(quantize, rng):
    # 32 x 32 blocks: large enough for dynamic-range quantization to make them int8.
    model = _model(layers.PeepholeLSTM(32), features=32)
    _randomize(model)
    flatbuffer = convert_to_tflite(model, fuse_lstm=True, quantize=quantize)
    ops = tflite_op_names(flatbuffer)
    assert FUSED in ops and "WHILE" not in ops
    ((inputs, options, _),) = _fused_ops(flatbuffer)
    assert min(inputs[9:12]) >= 0 and options.cellClip == 0.0
    x = rng.normal(size=(1, LENGTH, 32)).astype("float32")
    (output,) = _invoke(flatbuffer, x)
    np.testing.assert_allclose(output, model(x).numpy(), atol=0.05 if quantize == "dynamic" else 5e-3)
    assert len(flatbuffer) < len(convert_to_tflite(model, fuse_lstm=True)) * 0.6


def test_inputs_and_outputs_keep_the_model_order(rng):
    # Names and output count chosen so that sorted signature keys would scramble
    # them ("alpha" < "zeta", "output_10" < "output_2").
    a, b = keras.Input((None, FEATURES), name="zeta"), keras.Input((None, 3), name="alpha")
    h = layers.PeepholeLSTM(UNITS)(a)
    outputs = [keras.layers.Dense(k)(h) for k in range(1, 12)] + [layers.CoupledGateLSTM(4)(b)]
    model = keras.Model([a, b], outputs)
    _randomize(model)
    flatbuffer = convert_to_tflite(model, fuse_lstm=True)
    xa = rng.normal(size=(1, LENGTH, FEATURES)).astype("float32")
    xb = rng.normal(size=(1, LENGTH, 3)).astype("float32")
    results = run_tflite(flatbuffer, xa, xb)
    for result, expected in zip(results, model([xa, xb]), strict=True):
        np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6)


def test_batch_size_sets_the_static_batch(rng):
    model = _model(layers.PeepholeLSTM(UNITS, return_sequences=True))
    _randomize(model)
    flatbuffer = convert_to_tflite(model, fuse_lstm=True, batch_size=3)
    assert Interpreter(model_content=flatbuffer).get_input_details()[0]["shape"][0] == 3
    xs = [rng.normal(size=(3, LENGTH, FEATURES)).astype("float32") for _ in range(2)]
    _assert_matches_keras(flatbuffer, model, xs)


def test_signature_batch_that_contradicts_batch_size_is_an_error():
    import tensorflow as tf

    model = _model(layers.PeepholeLSTM(UNITS))
    signature = [tf.TensorSpec([2, None, FEATURES], tf.float32)]
    with pytest.raises(ValueError, match="batch 2 but batch_size=3"):
        convert_to_tflite(model, signature, fuse_lstm=True, batch_size=3)
