"""SinusoidalPositionalEncoding against the closed-form formula."""

import re

import keras
import numpy as np
import pytest

from keras_seq import layers
from keras_seq.layers.attention import _masking


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


def _P(positions, d, w=10000.0):
    """P at any array of positions, (..., T) -> (..., T, d), vectorised in float64."""
    i = np.arange(d)
    angle = np.asarray(positions, "float64")[..., None] / w ** ((i - i % 2) / d)
    return np.where(i % 2 == 0, np.sin(angle), np.cos(angle))


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


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_inputs_are_read_as_float32_values(rng, dtype):
    x = rng.integers(-5, 6, size=(2, 7, 6)).astype(dtype)
    y = layers.SinusoidalPositionalEncoding()(x)
    assert keras.backend.standardize_dtype(y.dtype) == "float32"
    np.testing.assert_allclose(y, x + _P(np.arange(7), 6), atol=1e-6)


@pytest.mark.parametrize("dtype, policy", [("float16", None), (None, "mixed_float16")])
def test_float16_layer_adds_P_in_float16_for_float_and_integer_inputs(rng, dtype, policy):
    if policy:
        keras.mixed_precision.set_global_policy(policy)
    pe = layers.SinusoidalPositionalEncoding(dtype=dtype)
    x = rng.integers(-5, 6, size=(2, 9, 8))
    for inputs in (x.astype("int32"), x.astype("float32")):
        y = pe(inputs, start_index=40)
        assert keras.backend.standardize_dtype(y.dtype) == "float16"
        np.testing.assert_allclose(
            np.asarray(y, "float32"), x + _P(40 + np.arange(9), 8), atol=1e-2
        )


def test_values_at_positions_0_and_3_are_kerashubs():
    """The numbers of KerasHub's SinePositionEncoding test (d = 6)."""
    y = np.asarray(layers.SinusoidalPositionalEncoding()(np.zeros((1, 4, 6), "float32")))
    np.testing.assert_allclose(y[0, 0], [0.0, 1.0, 0.0, 1.0, 0.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(
        y[0, 3], [0.14112, -0.98999, 0.13879, 0.99032, 0.00646, 0.99997], atol=1e-5
    )


@pytest.mark.parametrize("shape", [(2, 3, 7, 6), (1, 2, 3, 5, 7)])
def test_any_leading_axes_get_P_of_the_second_to_last_axis(rng, shape):
    x = rng.normal(size=shape).astype("float32")
    pe = layers.SinusoidalPositionalEncoding()
    T, d = shape[-2:]
    np.testing.assert_allclose(pe(x), x + _P(np.arange(T), d), atol=1e-6)
    np.testing.assert_allclose(
        pe(x[..., 2:4, :], start_index=2), x[..., 2:4, :] + _P([2, 3], d), atol=1e-6
    )


@pytest.mark.parametrize(
    "x_shape, positions",
    [
        ((2, 2, 4), [[0, 1], [1, 0]]),  # KerasHub's test: per-sequence positions
        ((2, 4, 6), [3, 0, 17, 5]),  # (T,): the same for every sequence
        ((2, 3, 6), [[0.5, 1.25, 2.0], [100.0, 7.5, 3.0]]),  # fractional
        ((2, 3, 4, 6), np.arange(2 * 3 * 4).reshape(2, 3, 4)),  # (B, X, T)
        ((2, 3, 4, 6), np.arange(12).reshape(3, 4) * 7),  # (X, T)
        ((2, 3, 4, 6), np.arange(8).reshape(2, 1, 4)),  # (B, 1, T)
    ],
)
def test_positions_argument_gives_P_at_those_positions(rng, x_shape, positions):
    x = rng.normal(size=x_shape).astype("float32")
    positions = np.asarray(positions)
    pe = layers.SinusoidalPositionalEncoding()
    expected = x + _P(positions, x_shape[-1])
    np.testing.assert_allclose(pe(x, positions=positions), expected, atol=1e-5)
    # start_index is ignored when positions are given (as in KerasHub).
    np.testing.assert_allclose(pe(x, start_index=9, positions=positions), expected, atol=1e-5)


def test_kerashub_positions_values():
    y = layers.SinusoidalPositionalEncoding()(
        np.zeros((2, 2, 4), "float32"), positions=np.array([[0, 1], [1, 0]])
    )
    pos_0, pos_1 = [0.0, 1.0, 0.0, 1.0], [0.84147, 0.54030, 0.009999, 0.99995]
    np.testing.assert_allclose(y, [[pos_0, pos_1], [pos_1, pos_0]], atol=1e-5)


@pytest.mark.parametrize(
    "x_shape, positions_shape",
    [((2, 3, 4), (3, 2)), ((2, 3, 4), (2, 4)), ((2, 3, 4), (1, 2, 3)), ((2, 3, 4), ()),
     ((2, 3, 4), (2, 1)), ((2, 3, 5, 4), (3, 2, 5))],
)
def test_positions_that_do_not_fit_the_inputs_raise_naming_the_argument(x_shape, positions_shape):
    pe = layers.SinusoidalPositionalEncoding(name="pe")
    with pytest.raises(
        ValueError,
        match=rf"'pe': invalid shape for argument `positions`: expected \(\.\.\., time\) "
        rf"broadcastable to the leading axes of `inputs`, {re.escape(str(x_shape[:-1]))}, "
        rf"received shape {re.escape(str(positions_shape))}",
    ):
        pe(np.zeros(x_shape, "float32"), positions=np.zeros(positions_shape, "int32"))


def test_symbolic_output_shapes_as_kerashubs():
    pe = layers.SinusoidalPositionalEncoding()
    assert pe(keras.Input((100, 32))).shape == (None, 100, 32)
    assert pe(keras.Input((None, 32))).shape == (None, None, 32)
    assert pe(keras.Input((None, 100, 32))).shape == (None, None, 100, 32)
    positions = keras.Input((7,), dtype="int32")
    assert pe(keras.Input((None, 32)), positions=positions).shape == (None, 7, 32)
    with pytest.raises(ValueError, match=r"argument `positions`"):
        pe(keras.Input((5, 32)), positions=positions)


def test_variable_length_model_with_positions_input(rng):
    inputs = keras.Input((None, 6))
    positions = keras.Input((None,), dtype="int32")
    pe = layers.SinusoidalPositionalEncoding()
    model = keras.Model([inputs, positions], [pe(inputs), pe(inputs, positions=positions)])
    for T in (3, 9):
        x = rng.normal(size=(2, T, 6)).astype("float32")
        p = rng.integers(0, 50, size=(2, T)).astype("int32")
        y, y_at = model.predict([x, p], verbose=0)  # compiled (jit on JAX, tf.function)
        np.testing.assert_allclose(y, x + _P(np.arange(T), 6), atol=1e-5)
        np.testing.assert_allclose(y_at, x + _P(p, 6), atol=1e-5)


@pytest.mark.tensorflow_only  # tf.function with an unknown time axis
def test_tf_function_with_unknown_length_and_positions_traces_once(rng):
    import tensorflow as tf

    pe = layers.SinusoidalPositionalEncoding()

    @tf.function(input_signature=[
        tf.TensorSpec((None, None, None, 6)), tf.TensorSpec((None, None), tf.int32)
    ])
    def run(x, positions):
        return pe(x), pe(x, positions=positions)

    for T in (2, 5):
        x = rng.normal(size=(2, 3, T, 6)).astype("float32")
        p = rng.integers(0, 50, size=(3, T)).astype("int32")
        y, y_at = run(x, p)
        np.testing.assert_allclose(y, x + _P(np.arange(T), 6), atol=1e-5)
        np.testing.assert_allclose(y_at, x + _P(p, 6), atol=1e-5)
    assert run.experimental_get_tracing_count() == 1


def test_mask_passes_through_with_leading_axes_and_positions(rng):
    tokens = np.array([[[1, 2, 0], [3, 0, 0]], [[4, 4, 4], [0, 0, 0]]])  # (B, X, T)
    x = keras.layers.Embedding(5, 4, mask_zero=True)(tokens)
    pe = layers.SinusoidalPositionalEncoding()
    for y in (pe(x), pe(x, positions=np.array([5, 6, 7]))):
        np.testing.assert_array_equal(_masking.keras_mask(y), tokens != 0)
    np.testing.assert_allclose(
        pe(x, positions=np.array([5, 6, 7])) - np.asarray(x), np.broadcast_to(
            _P([5, 6, 7], 4), (2, 2, 3, 4)), atol=1e-6
    )


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
