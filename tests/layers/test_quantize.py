"""Keras' ``model.quantize("int8")`` on the package's recurrent cells, on every backend.

The reference: the same float model with each ``*kernel`` weight replaced by
its int8 rounding in NumPy (per output channel, the largest magnitude to
127, as Keras' Dense), which the quantized model must compute exactly; and
the float model itself, within 2%. The quantized model saves and reloads
(``safe_mode=True``) quantized.
"""

import warnings

import keras
import numpy as np
import pytest
from keras import ops

from keras_seq import layers

U, F = 8, 5

CELLS = {
    "PeepholeLSTM": lambda: layers.PeepholeLSTM(U, return_sequences=True),
    "CoupledGateLSTM": lambda: layers.CoupledGateLSTM(U, return_sequences=True),
    "GRU": lambda: layers.GRU(U, return_sequences=True),
    "LayerNormLSTM": lambda: layers.LayerNormLSTM(U, return_sequences=True),
    "NTM": lambda: layers.NTM(U, memory_size=6, memory_width=4, return_sequences=True),
    "MinGRU": lambda: layers.MinGRU(U, return_sequences=True),
    "MinLSTM": lambda: layers.MinLSTM(U, return_sequences=True),
    "SLSTM": lambda: layers.SLSTM(U, return_sequences=True),
    "MLSTM": lambda: layers.MLSTM(U, return_sequences=True),
    "RGLRU": lambda: layers.RGLRU(F, return_sequences=True),
    "Bidirectional(GRU)": lambda: layers.Bidirectional(layers.GRU(U, return_sequences=True)),
}


@keras.saving.register_keras_serializable(package="keras_seq_tests")
class ScaledTanhCell(layers.RecurrentCell):
    """A user's cell: h = tanh(x W + h U) * gain; its weights are plain kernels."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units, self.state_size = units, [units]

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), name="kernel")
        self.recurrent_kernel = self.add_weight(shape=(self.units, self.units),
                                                name="recurrent_kernel")
        self.gain = self.add_weight(shape=(self.units,), initializer="ones", name="gain")

    def project(self, sequence):
        return ops.matmul(sequence, self.kernel)

    def step(self, inputs, states, training=False):
        h = ops.tanh(inputs + ops.matmul(states[0], self.recurrent_kernel)) * self.gain
        return h, [h]

    def get_config(self):
        return {**super().get_config(), "units": self.units}


@keras.saving.register_keras_serializable(package="keras_seq_tests")
class DecayCell(layers.RecurrentCell):
    """A user's cell without a kernel: h = a * h + x (a learned per channel)."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units, self.state_size = units, [units]

    def build(self, input_shape):
        self.decay = self.add_weight(shape=(self.units,), initializer="ones", name="decay")

    def step(self, inputs, states, training=False):
        h = self.decay * 0.5 * states[0] + inputs
        return h, [h]

    def get_config(self):
        return {**super().get_config(), "units": self.units}


CELLS["user cell (RNN)"] = lambda: layers.RNN(ScaledTanhCell(U), return_sequences=True)


def _model(branches):
    """One output per branch over the same input (one quantize, one save)."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((None, F))
    outputs = [keras.layers.Dense(3, name=f"head_{i}")(make()(inputs))
               for i, make in enumerate(branches.values())]
    model = keras.Model(inputs, outputs)
    rng = np.random.default_rng(1)
    for weight in model.weights:
        if "float" in str(weight.dtype):
            weight.assign(rng.normal(0.0, 0.4, weight.shape).astype("float32"))
    return model


def _x():
    return np.random.default_rng(2).normal(size=(3, 6, F)).astype("float32")


def _numpy(x):
    return ops.convert_to_numpy(x)


def _outputs(model, x):
    return [_numpy(y) for y in model(x)]


def _rounded(kernel):
    """The int8 rounding of a kernel, dequantized: per last-axis channel."""
    scale = np.abs(kernel).max(axis=tuple(range(kernel.ndim - 1))) / 127.0
    scale = np.where(scale > 0, scale, 1.0)
    return np.clip(np.round(kernel / scale), -127, 127) * scale


def _quantized(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Keras' note on the InputLayer
        model.quantize("int8")
    return model


def _cells(layer):
    if isinstance(layer, keras.layers.Bidirectional):
        return [layer.forward_layer.cell, layer.backward_layer.cell]
    return [layer.cell]


def test_quantize_int8_stores_int8_kernels_and_computes_their_rounding(tmp_path):
    model = _model(CELLS)
    x = _x()
    floats = _outputs(model, x)
    reference = _model(CELLS)
    for weight in reference.weights:
        if weight.name.endswith("kernel") and len(weight.shape) >= 2:
            # The heads are Keras' Dense: the same rounding of their kernels.
            weight.assign(_rounded(_numpy(weight)).astype("float32"))
    _quantized(model)
    recurrent = [layer for layer in model.layers if isinstance(layer, keras.layers.RNN)
                 or isinstance(layer, keras.layers.Bidirectional)]
    assert len(recurrent) == len(CELLS)
    for layer in recurrent:
        for cell in _cells(layer):
            assert cell.quantization_mode == "int8", type(cell).__name__
            int8 = [w for w in cell.weights if str(w.dtype) == "int8"]
            assert int8 and not any(w.trainable for w in int8)
            assert not [w for w in cell.trainable_weights if w.name.endswith("kernel")]
    got = _outputs(model, x)
    expected = _outputs(reference, x)
    for name, out, ref, before in zip(CELLS, got, expected, floats):
        scale = np.abs(before).max()
        # Keras' Dense heads also quantize their inputs, per row: 1% of the output.
        np.testing.assert_allclose(out, ref, atol=0.01 * scale, err_msg=name)
        assert np.abs(out - before).max() <= 0.02 * scale, name
    path = str(tmp_path / "quantized.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    for name, out, again in zip(CELLS, got, _outputs(loaded, x)):
        np.testing.assert_array_equal(again, out, err_msg=name)


def test_the_recurrent_step_computes_the_rounded_kernels_exactly():
    """No Dense around it: the quantized cell equals the float cell with
    rounded kernels to float rounding."""
    keras.utils.set_random_seed(4)
    inputs = keras.Input((None, F))
    model = keras.Model(inputs, layers.PeepholeLSTM(U, return_sequences=True)(inputs))
    reference = keras.models.clone_model(model)
    reference.set_weights(model.get_weights())
    for weight in reference.weights:
        if weight.name.endswith("kernel"):
            weight.assign(_rounded(_numpy(weight)).astype("float32"))
    _quantized(model)
    np.testing.assert_allclose(_numpy(model(_x())), _numpy(reference(_x())), atol=2e-6)


def test_a_cell_without_kernels_is_left_in_float_with_keras_warning():
    keras.utils.set_random_seed(5)
    inputs = keras.Input((None, F))
    model = keras.Model(inputs, layers.RNN(DecayCell(F), return_sequences=True)(inputs))
    before = _numpy(model(_x()))
    with pytest.warns(UserWarning, match="DecayCell does not have a `quantize`.*no weight "
                                         "named '\\*kernel'"):
        model.quantize("int8")
    assert model.layers[1].cell.quantization_mode is None
    np.testing.assert_array_equal(_numpy(model(_x())), before)


def test_only_int8_is_taken():
    model = _model({"GRU": CELLS["GRU"]})
    with pytest.warns(UserWarning, match="GRUCell does not have a `quantize`.*int8 only"):
        model.quantize("int4")
    assert model.layers[1].cell.quantization_mode is None


BLOCKS = {
    "MultiHeadAttention": (lambda h: layers.MultiHeadAttention(num_heads=2, key_dim=4)(h, h),
                           "EinsumDense"),
    "TransformerEncoder": (lambda h: layers.TransformerEncoder(
        num_heads=2, intermediate_dim=16)(h), "EinsumDense"),
    "TransformerDecoder": (lambda h: layers.TransformerDecoder(
        num_heads=2, intermediate_dim=16)(h, h), "EinsumDense"),
    "BahdanauAttention": (lambda h: h + layers.BahdanauAttention(U)(h, h), "BahdanauAttention"),
    "LuongAttention": (lambda h: h + layers.LuongAttention(U)(h, h), "LuongAttention"),
    "RecurrentBlock": (lambda h: layers.RNN(layers.RecurrentBlock(U), return_sequences=True)(h),
                       "RGLRUCell"),
}


def test_attention_and_transformer_blocks_quantize_and_reload(tmp_path):
    """Their Dense and EinsumDense sublayers by Keras, the attention
    mechanisms' own kernels here; each reloads quantized (Keras' own
    MultiHeadAttention does not)."""
    keras.utils.set_random_seed(6)
    inputs = keras.Input((None, F))
    h = keras.layers.Dense(U)(inputs)
    model = keras.Model(inputs, [keras.layers.Dense(3)(block(h)) for block, _ in BLOCKS.values()])
    x = _x()
    before = _outputs(model, x)
    _quantized(model)
    got = _outputs(model, x)
    kinds = {type(layer).__name__ for layer in model._flatten_layers() if layer.quantization_mode}
    assert {kind for _, kind in BLOCKS.values()} <= kinds, kinds
    for name, out, float_out in zip(BLOCKS, got, before):
        # Keras' EinsumDense and Dense quantize their inputs too (per row, at
        # each projection).
        assert np.abs(out - float_out).max() <= 0.03 * np.abs(float_out).max(), name
    path = str(tmp_path / "blocks.keras")
    model.save(path)
    for name, out, again in zip(BLOCKS, got, _outputs(keras.saving.load_model(path), x)):
        np.testing.assert_array_equal(again, out, err_msg=name)
