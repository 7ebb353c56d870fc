"""Export helpers: conversion freezes weights, op listing, running."""

import keras
import numpy as np
import pytest

from keras_seq.export import convert_to_tflite, run_tflite, tflite_op_names


@pytest.fixture(scope="module")
def dense_flatbuffer():
    inputs = keras.Input((None, 3))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    return model, convert_to_tflite(model)


def test_converted_dense_model_matches_keras_with_frozen_weights(dense_flatbuffer, rng):
    model, flatbuffer = dense_flatbuffer
    # Weights become constants: no resource variables left to initialise.
    assert not {"VAR_HANDLE", "READ_VARIABLE"} & tflite_op_names(flatbuffer)
    x = rng.normal(size=(4, 5, 3)).astype("float32")
    kernel, bias = model.get_weights()
    np.testing.assert_allclose(run_tflite(flatbuffer, x)[0], x @ kernel + bias, atol=1e-5)


def test_run_tflite_rejects_wrong_number_of_inputs(dense_flatbuffer):
    _, flatbuffer = dense_flatbuffer
    with pytest.raises(ValueError, match="run_tflite: the model takes 1 inputs, got 2"):
        run_tflite(flatbuffer, np.zeros((1, 2, 3), "float32"), np.zeros((1,), "float32"))
