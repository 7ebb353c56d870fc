"""The one argument-checking rule (keras_seq._validation)."""

import numpy as np
import pytest

from keras_seq import _validation as v


@pytest.mark.parametrize("value", [1, 7, np.int64(8), np.int32(3)])
def test_positive_int_accepts_python_and_numpy_integers(value):
    result = v.check_positive_int("GRU", "units", value)
    assert result == int(value) and type(result) is int


@pytest.mark.parametrize("value", [0, -2, 1.5, 8.0, float("nan")])
def test_positive_int_rejects_bad_values_with_value_error(value):
    with pytest.raises(ValueError, match=r"GRU: invalid value for argument `units`: expected a "
                                         r"positive integer, received"):
        v.check_positive_int("GRU", "units", value)


@pytest.mark.parametrize("value", [True, False, np.bool_(True), "8", None, [8]])
def test_positive_int_rejects_bad_types_with_type_error(value):
    with pytest.raises(TypeError, match=r"GRU: invalid type for argument `units`"):
        v.check_positive_int("GRU", "units", value)


def test_int_bounds_and_none():
    assert v.check_int("f", "n", None, minimum=0, allow_none=True) is None
    assert v.check_int("f", "n", 0, minimum=0) == 0
    with pytest.raises(ValueError, match=r"an integer in \[2, 4\], received 5"):
        v.check_int("f", "n", 5, minimum=2, maximum=4)


@pytest.mark.parametrize("value", [0, 0.0, 0.5, np.float32(0.25)])
def test_rate_accepts_numbers_in_unit_interval(value):
    assert v.check_rate("GRU", "dropout", value) == pytest.approx(float(value))


@pytest.mark.parametrize("value", [1.0, -0.1, float("nan"), float("inf")])
def test_rate_rejects_out_of_range(value):
    with pytest.raises(ValueError, match=r"argument `dropout`: expected a number in \[0.0, 1.0\)"):
        v.check_rate("GRU", "dropout", value)


@pytest.mark.parametrize("value", [None, "0.1", True])
def test_rate_rejects_non_numbers(value):
    with pytest.raises(TypeError, match="argument `dropout`"):
        v.check_rate("GRU", "dropout", value)


def test_float_exclusive_lower_bound():
    with pytest.raises(ValueError, match=r"expected a number > 0"):
        v.check_float("TransformerEncoder", "layer_norm_epsilon", 0.0, low=0.0, low_inclusive=False)


def test_choice_and_bool():
    assert v.check_choice("f", "cell", "gru", ("gru", "lstm")) == "gru"
    with pytest.raises(ValueError, match=r"expected one of 'gru', 'lstm', received 'rnn'"):
        v.check_choice("f", "cell", "rnn", ("gru", "lstm"))
    assert v.check_bool("f", "flag", np.bool_(False)) is False
    with pytest.raises(TypeError, match="argument `flag`"):
        v.check_bool("f", "flag", 1)


def test_activation():
    import keras

    assert v.check_activation("PositionwiseFeedForward", "activation", "relu") is (
        keras.activations.relu
    )
    with pytest.raises(ValueError, match=r"PositionwiseFeedForward: invalid value for argument "
                                         r"`activation`.*'nope'"):
        v.check_activation("PositionwiseFeedForward", "activation", "nope")
    with pytest.raises(TypeError, match="argument `activation`"):
        v.check_activation("PositionwiseFeedForward", "activation", 3)


def test_owner_name_of_a_layer_includes_its_name():
    import keras

    layer = keras.layers.Dense(2, name="proj")
    assert v.owner_name(layer) == "Dense 'proj'"
    error = v.shape_error(layer, "mask", "shape (batch, 5)", (2, np.int64(6)))
    assert str(error) == ("Dense 'proj': invalid shape for argument `mask`: expected shape "
                          "(batch, 5), received shape (2, 6).")


def test_selection():
    assert v.check_selection("f", "formats", ("tflite",), ("tflite", "onnx")) == ["tflite"]
    assert v.check_selection("f", "formats", "onnx", ("tflite", "onnx"), allow_single=True) == [
        "onnx"
    ]
    assert v.check_selection("f", "quantize", [], ("dynamic",), allow_empty=True) == []
    with pytest.raises(TypeError, match="argument `formats`: expected a sequence of choices"):
        v.check_selection("f", "formats", "onnx", ("tflite", "onnx"))
    with pytest.raises(ValueError, match="argument `formats`: expected at least one of"):
        v.check_selection("f", "formats", [], ("tflite", "onnx"))
    with pytest.raises(ValueError, match=r"expected one of 'tflite', 'onnx', received 'tf'"):
        v.check_selection("f", "formats", ["tflite", "tf"], ("tflite", "onnx"))
