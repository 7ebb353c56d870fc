"""Every recurrent layer through every exporter of `keras_seq.export`.

The harness for exporters, as `layer_harness.run_layer_test` is for the
layers: a case per subclass of a package layer, per kind of user cell, and
per public recurrent layer whose own tests do not already convert it both
ways (`ELSEWHERE` names those tests, and a test keeps the two lists
complete), and per form of Keras' own LSTM, GRU, SimpleRNN and RNN, each
in a small functional model with random weights,
converted with `convert_to_onnx` (native recurrent nodes) and
`convert_to_tflite` (builtin ops only), both run and compared with Keras on
a batch of another size and length than anything traced. The ONNX
file must hold the operator the cell declares (``operator_form``), one per
layer and no ``Loop``, or a ``Loop`` where the cell declares none. A layer
that stops converting, or a subclass that loses its operator, fails here.
"""

import warnings

import keras
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from ai_edge_litert.interpreter import Interpreter
from keras import ops

from keras_seq import layers
from keras_seq.export import convert_to_onnx, convert_to_tflite, tflite_op_names
from keras_seq.layers import LSTMForm

pytestmark = [pytest.mark.tensorflow_only, pytest.mark.slow]

F, U = 3, 4


@keras.saving.register_keras_serializable(package="keras_seq_tests")
class SubclassedPeepholeLSTM(layers.PeepholeLSTM):
    pass


@keras.saving.register_keras_serializable(package="keras_seq_tests")
class SubclassedGRU(layers.GRU):
    pass


class ScaledStepCell(layers.PeepholeLSTMCell):
    """Redefines the step (h scaled by 2): its parent's LSTM operator no longer holds."""

    def step(self, inputs, states, training=False):
        h, new_states = super().step(inputs, states, training=training)
        return 2.0 * h, [2.0 * h, new_states[1]]


class PlainLSTMCell(layers.RecurrentCell):
    """A user's LSTM in keras.ops that declares the operator it computes."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units, self.state_size = units, [units, units]

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], 4 * self.units), name="kernel")
        self.recurrent_kernel = self.add_weight(shape=(self.units, 4 * self.units),
                                                name="recurrent_kernel")
        self.bias = self.add_weight(shape=(4 * self.units,), name="bias")

    def project(self, sequence):
        return ops.matmul(sequence, self.kernel) + self.bias

    def step(self, inputs, states, training=False):
        h, c = states
        i, f, g, o = ops.split(inputs + ops.matmul(h, self.recurrent_kernel), 4, axis=-1)
        c = ops.sigmoid(f) * c + ops.sigmoid(i) * ops.tanh(g)
        h = ops.sigmoid(o) * ops.tanh(c)
        return h, [h, c]

    def operator_form(self):
        return LSTMForm(self.kernel, self.recurrent_kernel, self.bias)


class QRNNCell(layers.RecurrentCell):
    """A user's linear cell: QRNN's f-pooling, `project` and `coefficients` only."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units, self.state_size = units, units

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], 2 * self.units), name="kernel")

    def project(self, sequence):
        return ops.matmul(sequence, self.kernel)

    def coefficients(self, projected):
        f, z = ops.split(projected, 2, axis=-1)
        f = ops.sigmoid(f)
        return f, (1.0 - f) * ops.tanh(z)


# name -> (layer factory, input width, the ONNX operator of each layer or None: a Loop)
CASES = {
    "LayerNormLSTM": (lambda: layers.LayerNormLSTM(U, return_sequences=True), F, None),
    "subclass of PeepholeLSTM": (lambda: SubclassedPeepholeLSTM(U, return_sequences=True), F,
                                 "LSTM"),
    "subclass of GRU": (lambda: SubclassedGRU(U, return_sequences=True), F, "GRU"),
    "subclass redefining the step": (
        lambda: layers.RNN(ScaledStepCell(U), return_sequences=True), F, None),
    "user cell with an operator form": (
        lambda: layers.RNN(PlainLSTMCell(U), return_sequences=True), F, "LSTM"),
    "user linear cell": (lambda: layers.RNN(QRNNCell(U), return_sequences=True), F, None),
    # Keras' own layers: native nodes in ONNX, this package's loop in TFLite.
    "keras LSTM": (lambda: keras.layers.LSTM(U, return_sequences=True), F, "LSTM"),
    "keras LSTM go_backwards": (
        lambda: keras.layers.LSTM(U, return_sequences=True, go_backwards=True), F, "LSTM"),
    "keras GRU": (lambda: keras.layers.GRU(U, return_sequences=True), F, "GRU"),
    "keras GRU reset_after=False": (
        lambda: keras.layers.GRU(U, return_sequences=True, reset_after=False), F, "GRU"),
    "keras SimpleRNN": (lambda: keras.layers.SimpleRNN(U, return_sequences=True), F, "RNN"),
    "keras Bidirectional(LSTM)": (
        lambda: keras.layers.Bidirectional(keras.layers.LSTM(U, return_sequences=True)), F,
        "LSTM"),
    "keras RNN of an LSTMCell": (
        lambda: keras.layers.RNN(keras.layers.LSTMCell(U), return_sequences=True), F, "LSTM"),
}
# The public recurrent layers whose own tests convert them with both exporters
# and compare with Keras (kept there: they check more than this harness).
ELSEWHERE = {
    "PeepholeLSTM": "test_export_onnx_recurrent.py, test_recurrent_export.py",
    "CoupledGateLSTM": "test_export_onnx_recurrent.py, test_recurrent_export.py",
    "GRU": "test_export_onnx_recurrent.py, test_recurrent_export.py",
    "ConvertibleLSTM": "test_export_onnx_recurrent.py, test_keras_export_paths.py",
    "ConvertibleSimpleRNN": "test_export_onnx_recurrent.py, test_keras_export_paths.py",
    "NTM": "test_keras_export_paths.py, test_ntm.py",
    "MinGRU": "test_min_gru.py (parallel_family: streaming in LiteRT and onnxruntime)",
    "MinLSTM": "test_min_lstm.py (parallel_family)",
    "RGLRU": "test_rg_lru.py (parallel_family)",
    "SLSTM": "test_s_lstm.py (parallel_family)",
    "MLSTM": "test_m_lstm.py (parallel_family)",
    "RNN": "test_user_cell.py (a user's MGU cell)",
    "RecurrentDecoder": "test_export.py, test_export_onnx.py (the seq2seq builders)",
}
RECURRENT_OPS = ("LSTM", "GRU", "RNN", "Loop")


def test_every_public_recurrent_layer_goes_through_both_exporters_here_or_in_its_tests():
    public = {name for name in layers.__all__ if isinstance(getattr(layers, name), type)
              and issubclass(getattr(layers, name), keras.layers.RNN)}
    assert public <= set(CASES) | set(ELSEWHERE), sorted(public - set(CASES) - set(ELSEWHERE))


def _model(make, features):
    """Two layers of the case, stacked: a subclass or a lowering holds for each."""
    keras.utils.set_random_seed(3)
    inputs = keras.Input((None, features), name="x")
    model = keras.Model(inputs, make()(make()(inputs)))
    rng = np.random.default_rng(1)
    for weight in model.weights:
        weight.assign(rng.normal(0.0, 0.5, weight.shape).astype(weight.dtype))
    return model


def _x(features):
    return np.random.default_rng(2).normal(size=(3, 7, features)).astype("float32")


def _ops(graph) -> list[str]:
    return [node.op_type for node in graph.node if node.op_type in RECURRENT_OPS]


@pytest.mark.parametrize("name", list(CASES))
def test_onnx_writes_the_declared_operator_and_matches_keras(name, tmp_path):
    make, features, op = CASES[name]
    model = _model(make, features)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the OpenVINO note on peepholes
        path = convert_to_onnx(model, tmp_path / "model.onnx")
    found = _ops(onnx.load(path).graph)
    if op is None:  # each layer's loop (a block of steps per iteration, then the rest)
        assert found and set(found) == {"Loop"}, found
    else:
        assert found == [op, op], found
    x = _x(features)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"x": x})
    np.testing.assert_allclose(got, model(x), atol=1e-5)


@pytest.mark.parametrize("name", list(CASES))
def test_tflite_is_builtin_only_and_matches_keras(name):
    make, features, _ = CASES[name]
    model = _model(make, features)
    flatbuffer = convert_to_tflite(model)
    assert not [op for op in tflite_op_names(flatbuffer) if "FLEX" in op or "CUSTOM" in op]
    x = _x(features)
    runner = Interpreter(model_content=flatbuffer).get_signature_runner()
    (got,) = runner(x=x).values()
    np.testing.assert_allclose(got, model(x), atol=1e-5)
