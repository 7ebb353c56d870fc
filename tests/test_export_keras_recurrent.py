"""Keras' own recurrent layers through `convert_to_tflite`.

A mobile developer's model mixes `keras.layers.LSTM`, `GRU` and `SimpleRNN`
with this package's layers. Their own loop (TensorArrays) needs the Flex
delegate in TFLite with a dynamic batch or length; the exporters lower each
one into the package's loop for the conversion. The reference is Keras
itself: each model runs in Keras on a right-padded batch (masked steps, an
empty row) of another size and length than anything traced, and in LiteRT
without its default delegates (the builtin kernels alone). (ONNX: the
same layers, masked, are in test_export_onnx_recurrent.py and the
layer x exporter harness, tests/layers/test_every_layer_exports.py.)
"""

import warnings

import keras
import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from keras_seq import layers
from keras_seq.export import convert_to_tflite, tflite_op_names

pytestmark = [pytest.mark.tensorflow_only, pytest.mark.slow]

VOCAB, WIDTH, U = 20, 6, 32
L = keras.layers

# name -> the recurrent part of the model, applied to the masked embeddings
MODELS = {
    "LSTM": lambda e: L.LSTM(U)(e),
    "GRU": lambda e: L.GRU(U)(e),
    "GRU reset_after=False": lambda e: L.GRU(U, reset_after=False)(e),
    "SimpleRNN": lambda e: L.SimpleRNN(U)(e),
    "Bidirectional(LSTM)": lambda e: L.Bidirectional(L.LSTM(U))(e),
    "LSTM go_backwards": lambda e: L.LSTM(U, go_backwards=True)(e),
    "LSTM on a PeepholeLSTM": lambda e: L.LSTM(U)(layers.PeepholeLSTM(4, return_sequences=True)(e)),
    "Bidirectional(GRU) sequences": lambda e: L.Bidirectional(
        L.GRU(U, return_sequences=True), merge_mode="sum")(e),
}


def _model(name):
    keras.utils.set_random_seed(0)
    ids = keras.Input((None,), dtype="int32", name="ids")
    embedded = L.Embedding(VOCAB, WIDTH, mask_zero=True)(ids)
    model = keras.Model(ids, MODELS[name](embedded))
    rng = np.random.default_rng(1)
    for weight in model.weights:  # random, not Keras' initial values (zero biases)
        scale = 1.0 / np.sqrt(weight.shape[0]) if len(weight.shape) == 2 else 0.5
        weight.assign(rng.normal(0.0, scale, weight.shape).astype(weight.dtype))
    return model


def _padded_ids():
    """Right padding of three lengths and an empty row; batch and length
    unlike any traced shape."""
    ids = np.random.default_rng(2).integers(1, VOCAB, (4, 9)).astype("int32")
    ids[1, 6:] = 0
    ids[2, 2:] = 0
    ids[3] = 0
    return ids


def _litert(flatbuffer, ids):
    interpreter = Interpreter(
        model_content=flatbuffer,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    (got,) = interpreter.get_signature_runner()(ids=ids).values()
    return got


@pytest.mark.parametrize("name", list(MODELS))
def test_tflite_is_builtin_only_and_equals_keras(name):
    model = _model(name)
    ids = _padded_ids()
    flatbuffer = convert_to_tflite(model)
    assert not [op for op in tflite_op_names(flatbuffer) if op.startswith("CUSTOM")]
    np.testing.assert_allclose(_litert(flatbuffer, ids), model(ids), atol=1e-5)
    # The same model, quantized: the recurrent kernels (4096 values and more)
    # stored as int8 or float16, so the file is smaller.
    for quantize, atol in (("dynamic", 0.05), ("float16", 5e-3)):
        quantized = convert_to_tflite(model, quantize=quantize)
        assert len(quantized) < len(flatbuffer), (len(quantized), len(flatbuffer))
        assert not [op for op in tflite_op_names(quantized) if op.startswith("CUSTOM")]
        np.testing.assert_allclose(_litert(quantized, ids), model(ids), atol=atol)


def test_the_fused_lstm_path_keeps_a_masked_keras_lstm_builtin():
    """``fuse_lstm=True`` cannot fuse a masked layer: it keeps a loop, builtin."""
    model = _model("LSTM on a PeepholeLSTM")
    ids = _padded_ids()[:1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the layers it cannot fuse, named
        flatbuffer = convert_to_tflite(model, fuse_lstm=True)
    assert not [op for op in tflite_op_names(flatbuffer) if op.startswith("CUSTOM")]
    np.testing.assert_allclose(_litert(flatbuffer, ids), model(ids), atol=1e-5)


def test_a_conversion_leaves_the_callers_layers_as_they_were():
    model = _model("Bidirectional(LSTM)")
    ids = _padded_ids()
    before = np.asarray(model(ids))
    convert_to_tflite(model)
    for layer in model._flatten_layers(include_self=False, recursive=True):
        assert "inner_loop" not in layer.__dict__, layer.name
    np.testing.assert_array_equal(model(ids), before)


def test_a_layer_it_cannot_lower_is_one_line_naming_the_layer():
    """Keras' ConvLSTM1D runs Keras' loop over images: no builtin form here."""
    inputs = keras.Input((None, 4, 2))
    model = keras.Model(inputs, L.ConvLSTM1D(3, 2, name="conv_lstm")(inputs))
    with pytest.raises(ValueError) as caught:
        convert_to_tflite(model)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 400, message
    assert "conv_lstm" in message and "ConvLSTM1D" in message, message


def test_a_keras_layer_inside_a_plain_function_fails_in_one_line(capfd):
    """A function whose keras.Model the converter is not given keeps Keras'
    loop: one line naming the ops and what to do, none of the converter's text."""
    import tensorflow as tf

    model = _model("LSTM")
    with pytest.raises(ValueError) as caught:
        convert_to_tflite(lambda ids: model(ids), [tf.TensorSpec([None, None], tf.int32)])
    message = str(caught.value)
    assert "\n" not in message and "tf.TensorListReserve" in message, message
    assert "convert the keras.Model" in message, message
    assert "loc(" not in capfd.readouterr().err


def test_a_classifier_with_keras_layers_converts_with_its_softmax():
    from keras_seq.export import convert_classifier_to_tflite

    keras.utils.set_random_seed(0)
    ids = keras.Input((None,), dtype="int32", name="ids")
    embedded = L.Embedding(VOCAB, WIDTH, mask_zero=True)(ids)
    hidden = L.Bidirectional(L.GRU(U, return_sequences=True))(embedded)
    logits = L.Dense(3)(L.SimpleRNN(U)(hidden))
    model = keras.Model(ids, logits)
    padded = _padded_ids()
    flatbuffer = convert_classifier_to_tflite(model)
    assert not [op for op in tflite_op_names(flatbuffer) if op.startswith("CUSTOM")]
    expected = keras.ops.softmax(model(padded))
    np.testing.assert_allclose(_litert(flatbuffer, padded), expected, atol=1e-5)
