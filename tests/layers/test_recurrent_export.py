"""The recurrent layers convert to TFLite with builtin ops only and match Keras."""

import keras
import numpy as np
import pytest

from keras_seq import layers
from keras_seq.export import convert_to_tflite, run_tflite, tflite_op_names

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow_only]


@pytest.mark.parametrize("cls, kwargs", [
    (layers.PeepholeLSTM, {}),
    (layers.CoupledGateLSTM, {"use_peepholes": True}),
    (layers.GRU, {"reset_after": False}),
])
def test_masked_stack_converts_to_builtin_tflite_with_dynamic_batch_and_length(cls, kwargs, rng):
    tokens = keras.Input((None,), dtype="int32")
    h = keras.layers.Embedding(10, 4, mask_zero=True)(tokens)
    h = cls(6, return_sequences=True, **kwargs)(h)
    h = cls(5, go_backwards=True, **kwargs)(h)
    model = keras.Model(tokens, h)
    for weights in model.trainable_weights:
        weights.assign(rng.normal(0.0, 0.5, weights.shape))

    flatbuffer = convert_to_tflite(model)

    op_names = tflite_op_names(flatbuffer)  # while-loop subgraphs included
    assert not [name for name in op_names if name.startswith("CUSTOM")], op_names
    # The loop itself, its per-step matmul and the output writes are builtins.
    assert {"WHILE", "FULLY_CONNECTED", "GATHER", "SCATTER_ND", "SELECT_V2"} <= op_names
    for shape in [(2, 7), (3, 3)]:  # another batch and another length, same file
        x = rng.integers(1, 10, size=shape).astype("int32")
        x[0, -2:] = 0  # padding
        (got,) = run_tflite(flatbuffer, x)
        np.testing.assert_allclose(got, model(x), atol=1e-5)
