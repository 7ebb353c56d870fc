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


def _model(make):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((None, F))
    model = keras.Model(inputs, keras.layers.Dense(3, name="head")(make()(inputs)))
    rng = np.random.default_rng(1)
    for weight in model.weights:
        if "float" in str(weight.dtype):
            weight.assign(rng.normal(0.0, 0.4, weight.shape).astype("float32"))
    return model


def _x():
    return np.random.default_rng(2).normal(size=(3, 6, F)).astype("float32")


def _numpy(x):
    return ops.convert_to_numpy(x)


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


@pytest.mark.parametrize("name", list(CELLS))
def test_quantize_int8_stores_int8_kernels_and_computes_their_rounding(name, tmp_path):
    model = _model(CELLS[name])
    x = _x()
    float_out = _numpy(model(x))
    reference = _model(CELLS[name])
    for weight in reference.weights:
        if weight.name.endswith("kernel") and len(weight.shape) >= 2 and weight.path.split(
                "/")[0] != "head":
            weight.assign(_rounded(_numpy(weight)).astype("float32"))
    reference.get_layer("head").kernel.assign(
        _rounded(_numpy(reference.get_layer("head").kernel)))  # Keras' Dense, same rounding
    model = _quantized(model)
    recurrent = model.layers[1]
    cells = ([recurrent.forward_layer.cell, recurrent.backward_layer.cell]
             if isinstance(recurrent, keras.layers.Bidirectional) else [recurrent.cell])
    for cell in cells:
        assert cell.quantization_mode == "int8"
        int8 = [w for w in cell.weights if str(w.dtype) == "int8"]
        assert int8 and not any(w.trainable for w in int8)
        assert not [w for w in cell.trainable_weights if w.name.endswith("kernel")]
    got = _numpy(model(x))
    # Keras' Dense also quantizes its inputs, per row: within 1% of the float head.
    np.testing.assert_allclose(got, _numpy(reference(x)),
                               atol=0.01 * np.abs(float_out).max())
    assert np.abs(got - float_out).max() <= 0.02 * np.abs(float_out).max()
    path = str(tmp_path / "quantized.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(_numpy(loaded(x)), got)


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
    model = _model(CELLS["GRU"])
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


@pytest.mark.parametrize("name", list(BLOCKS))
def test_attention_and_transformer_blocks_quantize_and_reload(name, tmp_path):
    """Their Dense and EinsumDense sublayers by Keras, the attention
    mechanisms' own kernels here; each reloads quantized (Keras' own
    MultiHeadAttention does not)."""
    block, quantized_kind = BLOCKS[name]
    keras.utils.set_random_seed(6)
    inputs = keras.Input((None, F))
    model = keras.Model(inputs, keras.layers.Dense(3)(block(keras.layers.Dense(U)(inputs))))
    x = _x()
    before = _numpy(model(x))
    _quantized(model)
    got = _numpy(model(x))
    assert quantized_kind in {type(layer).__name__ for layer in model._flatten_layers()
                              if layer.quantization_mode}
    # Keras' EinsumDense and Dense quantize their inputs too (per row, at each
    # projection).
    assert np.abs(got - before).max() <= 0.03 * np.abs(before).max()
    path = str(tmp_path / "block.keras")
    model.save(path)
    np.testing.assert_array_equal(_numpy(keras.saving.load_model(path)(x)), got)
