"""LayerNormLSTM and LayerNormLSTMCell against a NumPy reference, TensorFlow Addons'
published numbers and Keras' own RNN loop."""

import json
import textwrap

import keras
import numpy as np
import pytest
from finite_differences import finite_difference_grads

from keras_seq.layers.recurrent import fast_paths
from keras_seq.layers.recurrent.layernorm_lstm import LayerNormLSTM, LayerNormLSTMCell

BACKEND = keras.backend.backend()

B, T, IN, U = 3, 5, 4, 6

# get_weights() order (TensorFlow Addons' order) and shapes.
WEIGHT_NAMES = [
    "kernel", "recurrent_kernel", "bias",
    "kernel_norm_gamma", "kernel_norm_beta",
    "recurrent_norm_gamma", "recurrent_norm_beta",
    "state_norm_gamma", "state_norm_beta",
]


def _weight_shapes(units=U, features=IN):
    gates = 4 * units
    return [(features, gates), (units, gates), (gates,), *[(gates,)] * 4, (units,), (units,)]


# --- NumPy reference, written from the equations of the cell's docstring -----------


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _np_layer_norm(v, gamma, beta, eps):
    mean = v.mean(axis=-1, keepdims=True)
    var = ((v - mean) ** 2).mean(axis=-1, keepdims=True)
    return gamma * (v - mean) / np.sqrt(var + eps) + beta


def _np_step(weights, x, states, eps=1e-3, sigma=_sigmoid):
    W, U_, b, g_x, b_x, g_h, b_h, g_c, b_c = weights
    h, c = states
    z = _np_layer_norm(x @ W, g_x, b_x, eps) + _np_layer_norm(h @ U_, g_h, b_h, eps) + b
    z_i, z_f, z_c, z_o = np.split(z, 4, axis=-1)
    i, f, c_tilde, o = sigma(z_i), sigma(z_f), np.tanh(z_c), sigma(z_o)
    c_t = _np_layer_norm(f * c + i * c_tilde, g_c, b_c, eps)
    h_t = o * np.tanh(c_t)
    return h_t, [h_t, c_t]


def _np_run(weights, x, states, mask=None, go_backwards=False, eps=1e-3, sigma=_sigmoid):
    """Keras semantics: masked steps keep the states and repeat the previous output."""
    steps = reversed(range(x.shape[1])) if go_backwards else range(x.shape[1])
    output, outputs = np.zeros_like(states[0]), []
    for t in steps:
        new_output, new_states = _np_step(weights, x[:, t], states, eps, sigma)
        if mask is not None:
            keep = mask[:, t, None]
            new_states = [np.where(keep, n, s) for n, s in zip(new_states, states)]
            new_output = np.where(keep, new_output, output)
        output, states = new_output, new_states
        outputs.append(output)
    return np.stack(outputs, axis=1), states


def _random_weights(rng, units=U, features=IN, dtype="float32"):
    """Random arrays in `WEIGHT_NAMES` order; γ around 1 so the norms stay well scaled."""
    return [
        rng.normal(1.0 if name.endswith("gamma") else 0.0, 0.3 if name.endswith("gamma") else 0.5,
                   shape).astype(dtype)
        for name, shape in zip(WEIGHT_NAMES, _weight_shapes(units, features))
    ]


def _make(rng, **kwargs):
    layer = LayerNormLSTM(U, **kwargs)
    layer.build((None, None, IN))
    weights = _random_weights(rng)
    layer.set_weights(weights)
    return layer, weights


def _ragged_mask(lengths, steps=T):
    return np.arange(steps)[None, :] < np.asarray(lengths)[:, None]


# --- against the NumPy reference -------------------------------------------------------


def test_without_bias_and_with_other_epsilon_matches_numpy_reference(rng):
    layer = LayerNormLSTM(U, use_bias=False, norm_epsilon=0.5, return_sequences=True)
    layer.build((None, None, IN))
    weights = _random_weights(rng)
    del weights[2]  # no bias
    layer.set_weights(weights)
    x = rng.normal(size=(B, T, IN)).astype("float32")
    reference = [*weights[:2], np.zeros(4 * U, "float32"), *weights[2:]]
    expected, _ = _np_run(reference, x, [np.zeros((B, U), "float32")] * 2, eps=0.5)
    np.testing.assert_allclose(layer(x), expected, atol=1e-5)


# Outside XLA the layer normalises the projection of all steps before the
# loop; under XLA on the CPU each step computes its own x_t W and LN_x
# (`LoopHints.projects_in_step_under_xla`).
@pytest.mark.parametrize("features", [IN, U + 2])
@pytest.mark.parametrize("jit", [False, True])
def test_input_norm_before_or_in_the_loop_matches_numpy_reference(features, jit, rng):
    if jit and BACKEND != "tensorflow":
        pytest.skip("jit_compile is TensorFlow's tf.function option")
    layer = LayerNormLSTM(U, return_sequences=True, return_state=True, go_backwards=True)
    layer.build((None, None, features))
    weights = _random_weights(rng, features=features)
    layer.set_weights(weights)
    x = rng.normal(0.0, 2.0, size=(B, T, features)).astype("float32")
    x[0, 1] = 0.0  # a row whose x W has no variance: LN_x gives 0, not NaN
    mask = _ragged_mask([5, 3, 1])
    states = [rng.normal(size=(B, U)).astype("float32") for _ in range(2)]

    hoisted = []

    def run(x, mask, h, c):
        hoisted.append(fast_paths.projects_before_loop(layer.cell, False))
        return layer(x, mask=mask, initial_state=[h, c])

    if BACKEND == "tensorflow":
        import tensorflow as tf

        run = tf.function(run, jit_compile=jit)
    sequence, h, c = run(x, mask, *states)
    if BACKEND == "tensorflow":  # the premise: x_t W in the step under XLA on the CPU
        assert hoisted == [not jit or bool(tf.config.list_logical_devices("GPU"))]
    expected, (expected_h, expected_c) = _np_run(weights, x, states, mask, go_backwards=True)
    np.testing.assert_allclose(sequence, expected, atol=2e-5)
    np.testing.assert_allclose(h, expected_h, atol=2e-5)
    np.testing.assert_allclose(c, expected_c, atol=2e-5)


def _hard_sigmoid(x):  # Keras 3's: relu6(x + 3) / 6
    return np.clip(x / 6.0 + 0.5, 0.0, 1.0)


def test_autodiff_gradient_matches_finite_differences(rng, gradients):
    """Training by autodiff of the loop (hard_sigmoid: no hand-written
    gradient on TensorFlow) through the LN_x projection, against
    float64 central differences of the NumPy reference, for x and every weight."""
    features = 2
    # Keras' JAX ops compute float64 in float32 (see test_recurrent).
    dtype, atol = ("float32", 2e-4) if BACKEND == "jax" else ("float64", 1e-6)
    layer = LayerNormLSTM(U, recurrent_activation="hard_sigmoid", return_sequences=True,
                          dtype=dtype)
    layer.build((None, None, features))
    weights = [w.astype("float64") for w in _random_weights(rng, features=features)]
    layer.set_weights(weights)
    x = rng.normal(size=(B, T, features))
    probe = rng.normal(size=(B, T, U))
    zeros = [np.zeros((B, U))] * 2

    def numpy_loss():
        sequence, _ = _np_run(weights, x, zeros, sigma=_hard_sigmoid)
        return np.sum(sequence * probe)

    expected = finite_difference_grads(numpy_loss, [x, *weights])

    def loss(x):
        sequence = layer(x, training=True)
        return keras.ops.sum(sequence * keras.ops.convert_to_tensor(probe, dtype))

    value, grads = gradients(loss, [x.astype(dtype)], layer.trainable_weights)
    np.testing.assert_allclose(float(value), numpy_loss(), rtol=1e-5)
    names = ["x", *WEIGHT_NAMES]
    for name, g, e in zip(names, grads, expected):
        np.testing.assert_allclose(np.asarray(g, "float64"), e, atol=atol, err_msg=name)


# --- TensorFlow Addons' published numbers --------------------------------------------


def _tfa_cell():
    # The cell of TensorFlow Addons' test: every kernel and bias entry 0.5,
    # ε = 1e-12 (unit_forget_bias, on by default there too, sets the forget bias to 1).
    return LayerNormLSTMCell(
        2, kernel_initializer=keras.initializers.Constant(0.5),
        recurrent_initializer=keras.initializers.Constant(0.5),
        bias_initializer=keras.initializers.Constant(0.5), norm_epsilon=1e-12,
    )


def test_cell_reproduces_tensorflow_addons_published_outputs():
    """TensorFlow Addons, tensorflow_addons/rnn/tests/layer_norm_lstm_cell_test.py,
    `test_cell_output`: the same inputs and constant weights, its expected numbers."""
    expected_h = np.array([[-0.47406167, 0.47406143]])
    expected_c = np.array([[-1.0, 1.0]])
    state0 = [0.1 * np.array([[2.0, 3.0]], "float32"), 0.1 * np.array([[0.0, 1.0]], "float32")]
    state1 = [0.1 * np.array([[6.0, 7.0]], "float32"), 0.1 * np.array([[4.0, 5.0]], "float32")]

    # Two cells stacked, input of width 2. With ε = 1e-12 the gate norms of
    # the second cell (all 4u entries of h U equal 0.65) amplify the rounding
    # of their mean: TensorFlow's sum is exact there, JAX's and PyTorch's are
    # not, and every z moves by ~0.06. TensorFlow Addons' numbers are
    # TensorFlow's, so this half runs there.
    if BACKEND == "tensorflow":
        stacked = keras.layers.StackedRNNCells([_tfa_cell(), _tfa_cell()])
        output, (states0, states1) = stacked(np.ones((1, 2), "float32"), [state0, state1])
        np.testing.assert_allclose(output, expected_h, rtol=1e-5)
        for h, c in (states0, states1):
            np.testing.assert_allclose(h, expected_h, rtol=1e-5)
            np.testing.assert_allclose(c, expected_c, rtol=1e-5)

    # One cell, input width 3 (!= units).
    cell = _tfa_cell()
    output, (h, c) = cell(np.ones((1, 3), "float32"), state0)
    np.testing.assert_allclose(output, expected_h, rtol=1e-5)
    np.testing.assert_allclose(h, expected_h, rtol=1e-5)
    np.testing.assert_allclose(c, expected_c, rtol=1e-5)
    # The forget bias is 1 (unit_forget_bias), the others 0.5; the norms start at γ=1, β=0.
    np.testing.assert_array_equal(cell.get_weights()[2], [0.5, 0.5, 1.0, 1.0] + [0.5] * 4)


# --- masking -------------------------------------------------------------------------


def test_all_masked_sequence_gives_finite_zero_output(rng):
    layer, _ = _make(rng, return_sequences=True, return_state=True)
    x = rng.normal(size=(B, T, IN)).astype("float32")
    sequence, *states = (np.asarray(o) for o in layer(x, mask=_ragged_mask([5, 0, 2])))
    assert np.all(np.isfinite(sequence)) and all(np.all(np.isfinite(s)) for s in states)
    np.testing.assert_array_equal(sequence[1], 0.0)
    for s in states:
        np.testing.assert_array_equal(s[1], 0.0)


# --- the training gradient -------------------------------------------------------------




def test_fit_with_dropout_updates_every_weight(rng):
    """Training runs end to end (dropout masks included) and reaches every weight."""
    model = keras.Sequential([
        keras.Input((T, IN)),
        LayerNormLSTM(U, dropout=0.2, recurrent_dropout=0.2, seed=1),
        keras.layers.Dense(1),
    ])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    before = [w.copy() for w in model.layers[0].get_weights()]
    x = rng.normal(size=(8, T, IN)).astype("float32")
    history = model.fit(x, rng.normal(size=(8, 1)), epochs=1, batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    for old, new in zip(before, model.layers[0].get_weights()):
        assert not np.allclose(old, new)


# --- weights, config, saving --------------------------------------------------------


def test_weights_are_in_tensorflow_addons_order_with_their_initial_values():
    layer = LayerNormLSTM(U, norm_gamma_initializer="ones", norm_beta_initializer="zeros")
    layer.build((None, None, IN))
    assert [w.name for w in layer.weights] == WEIGHT_NAMES
    assert [w.shape for w in layer.get_weights()] == _weight_shapes()
    assert [w.name for w in layer.cell.trainable_weights] == WEIGHT_NAMES
    values = dict(zip(WEIGHT_NAMES, layer.get_weights()))
    np.testing.assert_array_equal(values["bias"], np.repeat([0.0, 1.0, 0.0, 0.0], U))
    for name in ("kernel_norm", "recurrent_norm", "state_norm"):
        np.testing.assert_array_equal(values[f"{name}_gamma"], 1.0)
        np.testing.assert_array_equal(values[f"{name}_beta"], 0.0)


def test_config_round_trip_keeps_norm_arguments():
    layer = LayerNormLSTM(
        U, norm_epsilon=1e-5, norm_gamma_initializer=keras.initializers.Constant(2.0),
        norm_beta_initializer="ones", unit_forget_bias=False, return_state=True,
    )
    config = layer.get_config()
    assert config["norm_epsilon"] == 1e-5 and config["unit_forget_bias"] is False
    json.dumps(config)
    restored = LayerNormLSTM.from_config(config)
    assert restored.get_config() == config
    assert restored.norm_epsilon == 1e-5 and restored.cell.norm_epsilon == 1e-5
    restored.build((None, None, IN))
    np.testing.assert_array_equal(restored.cell.state_norm_gamma, 2.0)
    np.testing.assert_array_equal(restored.cell.kernel_norm_beta, 1.0)
    cell = LayerNormLSTMCell.from_config(restored.cell.get_config())
    assert cell.get_config() == restored.cell.get_config()


# --- arguments -------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [LayerNormLSTM, LayerNormLSTMCell])
@pytest.mark.parametrize("value, error", [
    (0.0, ValueError), (-1e-3, ValueError), (float("nan"), ValueError),
    ("1e-3", TypeError), (True, TypeError), (None, TypeError),
])
def test_bad_norm_epsilon_is_refused_by_name(cls, value, error):
    with pytest.raises(error, match=rf"^{cls.__name__}: .*`norm_epsilon`"):
        cls(4, norm_epsilon=value)


def test_integer_norm_epsilon_is_accepted_as_float():
    assert LayerNormLSTM(4, norm_epsilon=1).norm_epsilon == 1.0


# --- precision, export, other backends ---------------------------------------------


def test_mixed_precision_is_close_to_float32(rng):
    layer, weights = _make(rng, return_sequences=True)
    x = rng.normal(size=(B, T, IN)).astype("float32")
    reference = np.asarray(layer(x))
    half = LayerNormLSTM(U, return_sequences=True, dtype="mixed_float16")
    half.build((None, None, IN))
    half.set_weights(weights)
    got = half(x)
    assert keras.backend.standardize_dtype(got.dtype) == "float16"
    assert all(keras.backend.standardize_dtype(w.dtype) == "float32" for w in half.weights)
    np.testing.assert_allclose(np.asarray(got, "float32"), reference, atol=2e-2)


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_masked_stack_converts_to_builtin_tflite(rng):
    from keras_seq.export import convert_to_tflite, run_tflite, tflite_op_names

    tokens = keras.Input((None,), dtype="int32")
    h = keras.layers.Embedding(10, 4, mask_zero=True)(tokens)
    # Inputs no wider than the units: LN_x folded into the projection; then
    # wider: LN_x in the step. Both forms convert.
    h = LayerNormLSTM(5, return_sequences=True)(h)
    h = LayerNormLSTM(3, go_backwards=True)(h)
    model = keras.Model(tokens, h)
    for weight in model.trainable_weights:
        weight.assign(rng.normal(0.0, 0.5, weight.shape))

    flatbuffer = convert_to_tflite(model)

    op_names = tflite_op_names(flatbuffer)
    assert not [name for name in op_names if name.startswith("CUSTOM")], op_names
    assert {"WHILE", "FULLY_CONNECTED", "MEAN", "RSQRT"} <= op_names
    for shape in [(2, 7), (3, 3)]:  # another batch and another length, same file
        x = rng.integers(1, 10, size=shape).astype("int32")
        x[0, -2:] = 0  # padding
        (got,) = run_tflite(flatbuffer, x)
        np.testing.assert_allclose(got, model(x), atol=1e-5)


_OTHER_BACKEND_SCRIPT = textwrap.dedent("""
    import sys
    import keras
    import numpy as np
    from keras_seq.layers.recurrent.layernorm_lstm import LayerNormLSTM

    assert keras.backend.backend() == sys.argv[3], keras.backend.backend()
    data = np.load(sys.argv[1])
    weights = [data[f"w{i}"] for i in range(9)]
    layer = LayerNormLSTM(weights[1].shape[0], return_sequences=True, return_state=True)
    layer.build((None, None, weights[0].shape[0]))
    layer.set_weights(weights)
    outputs = layer(data["x"], mask=data["mask"])
    trained = layer(data["x"], mask=data["mask"], training=True)
    np.savez(sys.argv[2], *[keras.ops.convert_to_numpy(o) for o in [*outputs, *trained]])
""")

