"""SinusoidalPositionalEncoding against the closed-form formula."""

import re

import keras
import numpy as np
import pytest

from keras_seq import layers
from keras_seq.layers import _masking


def _formula(T, d, start=0, w=10000.0):
    """P[t, 2j] = sin(t / w^(2j/d)), P[t, 2j+1] = cos(t / w^(2j/d)), elementwise loops."""
    P = np.zeros((T, d))
    for t in range(T):
        pos = start + t
        for i in range(d):
            two_j = i - i % 2
            angle = pos / w ** (two_j / d)
            P[t, i] = np.sin(angle) if i % 2 == 0 else np.cos(angle)
    return P


@pytest.mark.parametrize("d", [16, 7])
def test_matches_formula_beyond_any_default_table_length(rng, d):
    # 2100 positions: longer than the usual 512/1024/2048-row tables.
    T = 2100
    x = rng.normal(size=(2, T, d)).astype("float32")
    y = np.asarray(layers.SinusoidalPositionalEncoding()(x))
    # float32 angles of ~2000 rad carry ~1e-4 absolute error in sin/cos.
    np.testing.assert_allclose(y - x, np.broadcast_to(_formula(T, d), x.shape), atol=5e-4)


def test_max_wavelength_is_used(rng):
    x = np.zeros((1, 9, 6), "float32")
    y = layers.SinusoidalPositionalEncoding(max_wavelength=50.0)(x)
    np.testing.assert_allclose(y[0], _formula(9, 6, w=50.0), atol=1e-6)


def test_start_index_continues_the_sequence(rng):
    x = rng.normal(size=(3, 12, 8)).astype("float32")
    pe = layers.SinusoidalPositionalEncoding()
    full = np.asarray(pe(x))
    for start in (0, 5, 11):
        step = pe(x[:, start : start + 1], start_index=keras.ops.convert_to_tensor(start))
        np.testing.assert_allclose(step, full[:, start : start + 1], atol=1e-6)
    np.testing.assert_allclose(pe(x[:, 4:9], start_index=4), full[:, 4:9], atol=1e-6)


@pytest.mark.tensorflow_only  # XLA compilation with tf.function and its tracing count
def test_compiled_step_traces_once_for_every_position():
    import tensorflow as tf

    pe = layers.SinusoidalPositionalEncoding()
    step = tf.function(lambda x, i: pe(x, start_index=i), jit_compile=True)
    x = tf.zeros((2, 1, 8))
    for i in range(6):
        y = step(x, tf.constant(i))
        np.testing.assert_allclose(y[0], _formula(1, 8, start=i), atol=1e-6)
    assert step.experimental_get_tracing_count() == 1


def test_mask_passes_through_and_mixed_precision(rng):
    keras.mixed_precision.set_global_policy("mixed_float16")
    tokens = np.array([[1, 2, 0], [3, 0, 0]])
    x = keras.layers.Embedding(5, 4, mask_zero=True)(tokens)
    y = layers.SinusoidalPositionalEncoding()(x)
    assert keras.backend.standardize_dtype(y.dtype) == "float16"
    np.testing.assert_array_equal(_masking.keras_mask(y), tokens != 0)
    np.testing.assert_allclose(np.asarray(y - x, "float32")[0], _formula(3, 4), atol=2e-3)


@pytest.mark.parametrize(
    "value, error",
    [
        (0, ValueError),
        (1.0, ValueError),
        (float("nan"), ValueError),
        ("1e4", TypeError),
        (None, TypeError),
        (True, TypeError),
    ],
)
def test_bad_max_wavelength_error_names_layer_argument_and_value(value, error):
    kind = "value" if error is ValueError else "type"
    with pytest.raises(
        error,
        match=rf"^SinusoidalPositionalEncoding 'pe': invalid {kind} for argument "
        rf"`max_wavelength`: .*received {re.escape(repr(value))}",
    ):
        layers.SinusoidalPositionalEncoding(max_wavelength=value, name="pe")


def test_numpy_numbers_are_accepted():
    assert layers.SinusoidalPositionalEncoding(np.int64(100)).max_wavelength == 100.0
    assert layers.SinusoidalPositionalEncoding(np.float32(50)).max_wavelength == 50.0


def test_bad_input_shape_raises():
    with pytest.raises(ValueError, match=r"'pe': invalid shape for argument `inputs`"):
        layers.SinusoidalPositionalEncoding(name="pe")(np.zeros((2, 5), "float32"))


def test_keras_file_round_trip(rng, tmp_path):
    inputs = keras.Input((None, 6))
    model = keras.Model(inputs, layers.SinusoidalPositionalEncoding(max_wavelength=100.0)(inputs))
    model.save(tmp_path / "pe.keras")
    restored = keras.models.load_model(tmp_path / "pe.keras", safe_mode=True)
    x = rng.normal(size=(2, 5, 6)).astype("float32")
    np.testing.assert_allclose(restored(x), model(x), atol=1e-6)
    assert restored.layers[-1].get_config() == model.layers[-1].get_config()


@pytest.mark.slow
@pytest.mark.tensorflow_only  # TFLite export
def test_tflite_matches_keras_with_tensor_start_index(rng):
    import tensorflow as tf

    from keras_seq.export import convert_to_tflite, run_tflite, tflite_op_names

    pe = layers.SinusoidalPositionalEncoding()
    flatbuffer = convert_to_tflite(
        lambda x, i: pe(x, start_index=i),
        [tf.TensorSpec((None, None, 6)), tf.TensorSpec((), tf.int32)],
    )
    assert not any(op.startswith("CUSTOM") for op in tflite_op_names(flatbuffer))
    x = rng.normal(size=(2, 4, 6)).astype("float32")
    for start in (0, 37):
        (y,) = run_tflite(flatbuffer, x, np.int32(start))
        np.testing.assert_allclose(y, pe(x, start_index=start), atol=1e-5)
