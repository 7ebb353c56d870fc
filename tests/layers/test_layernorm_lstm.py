"""LayerNormLSTM and LayerNormLSTMCell against a NumPy reference, TensorFlow Addons'
published numbers and Keras' own RNN loop."""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from keras import ops

from keras_seq.layers.layernorm_lstm import LayerNormLSTM, LayerNormLSTMCell

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


def _np_step(weights, x, states, eps=1e-3):
    W, U_, b, g_x, b_x, g_h, b_h, g_c, b_c = weights
    h, c = states
    z = _np_layer_norm(x @ W, g_x, b_x, eps) + _np_layer_norm(h @ U_, g_h, b_h, eps) + b
    z_i, z_f, z_c, z_o = np.split(z, 4, axis=-1)
    i, f, c_tilde, o = _sigmoid(z_i), _sigmoid(z_f), np.tanh(z_c), _sigmoid(z_o)
    c_t = _np_layer_norm(f * c + i * c_tilde, g_c, b_c, eps)
    h_t = o * np.tanh(c_t)
    return h_t, [h_t, c_t]


def _np_run(weights, x, states, mask=None, go_backwards=False, eps=1e-3):
    """Keras semantics: masked steps keep the states and repeat the previous output."""
    steps = reversed(range(x.shape[1])) if go_backwards else range(x.shape[1])
    output, outputs = np.zeros_like(states[0]), []
    for t in steps:
        new_output, new_states = _np_step(weights, x[:, t], states, eps)
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


@pytest.mark.parametrize("variant", ["plain", "masked_backwards_initial_state"])
def test_layer_and_cell_match_numpy_reference(variant, rng):
    layer, weights = _make(rng, return_sequences=True, return_state=True,
                           go_backwards=variant != "plain")
    x = rng.normal(size=(B, T, IN)).astype("float32")
    mask, initial, go_backwards = None, None, False
    states = [np.zeros((B, U), "float32")] * 2
    if variant != "plain":
        mask = _ragged_mask([5, 3, 1])
        states = [rng.normal(size=(B, U)).astype("float32") for _ in range(2)]
        initial, go_backwards = states, True
    expected, expected_states = _np_run(
        [w.astype("float64") for w in weights], x.astype("float64"),
        [s.astype("float64") for s in states], mask, go_backwards,
    )

    # Inference (TensorFlow's convertible loop) and training (its TensorArray
    # loop, trained by autodiff): the same numbers.
    for training in (False, True):
        sequence, *final_states = layer(x, mask=mask, initial_state=initial, training=training)
        np.testing.assert_allclose(sequence, expected, atol=1e-5)
        for got, want in zip(final_states, expected_states):
            np.testing.assert_allclose(got, want, atol=1e-5)

    # The per-step cell, driven by Keras' own generic loop.
    rnn = keras.layers.RNN(
        layer.cell, return_sequences=True, return_state=True, go_backwards=go_backwards
    )
    cell_sequence, *cell_states = rnn(x, mask=mask, initial_state=initial)
    if BACKEND == "jax" and mask is not None:
        # Keras' JAX loop outputs the initial state h_0, not zeros, at the
        # masked steps before the first valid one: compare the valid steps.
        valid = mask[:, ::-1] if go_backwards else mask  # in processing order
        cell_sequence, expected = np.asarray(cell_sequence)[valid], expected[valid]
    np.testing.assert_allclose(cell_sequence, expected, atol=1e-5)
    for got, want in zip(cell_states, expected_states):
        np.testing.assert_allclose(got, want, atol=1e-5)


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


def test_zoneout_at_inference_mixes_each_state_with_its_previous_value(rng):
    """At inference a state is z·previous + (1 − z)·new (z_h, z_c), after LN_c."""
    z_h, z_c = 0.3, 0.6
    layer = LayerNormLSTM(U, zoneout=[z_h, z_c], return_sequences=True, return_state=True)
    layer.build((None, None, IN))
    weights = _random_weights(rng)
    layer.set_weights(weights)
    x = rng.normal(size=(B, T, IN)).astype("float32")
    h, c = np.zeros((B, U)), np.zeros((B, U))
    expected = []
    for t in range(T):
        _, (h_new, c_new) = _np_step(weights, x[:, t], [h, c])
        h, c = z_h * h + (1 - z_h) * h_new, z_c * c + (1 - z_c) * c_new
        expected.append(h)
    sequence, h_final, c_final = layer(x)
    np.testing.assert_allclose(sequence, np.stack(expected, axis=1), atol=1e-5)
    np.testing.assert_allclose(h_final, h, atol=1e-5)
    np.testing.assert_allclose(c_final, c, atol=1e-5)


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


@pytest.mark.parametrize("go_backwards", [False, True])
def test_padded_batch_equals_unpadded(go_backwards, rng):
    layer, _ = _make(rng, return_sequences=True, return_state=True, go_backwards=go_backwards)
    lengths = [5, 3, 2]
    x = rng.normal(size=(B, T, IN)).astype("float32")
    sequence, *states = layer(x, mask=_ragged_mask(lengths))
    for b, length in enumerate(lengths):
        alone, *alone_states = layer(x[b : b + 1, :length])
        for got, want in zip(states, alone_states):
            np.testing.assert_allclose(got[b], want[0], atol=1e-5)
        # Valid positions in processing order: the first `length` outputs going
        # forwards; going backwards the padded steps come first and repeat zeros.
        valid = sequence[b, :length] if not go_backwards else sequence[b, T - length :]
        np.testing.assert_allclose(valid, alone[0], atol=1e-5)


def test_all_masked_sequence_gives_finite_zero_output(rng):
    layer, _ = _make(rng, return_sequences=True, return_state=True)
    x = rng.normal(size=(B, T, IN)).astype("float32")
    sequence, *states = (np.asarray(o) for o in layer(x, mask=_ragged_mask([5, 0, 2])))
    assert np.all(np.isfinite(sequence)) and all(np.all(np.isfinite(s)) for s in states)
    np.testing.assert_array_equal(sequence[1], 0.0)
    for s in states:
        np.testing.assert_array_equal(s[1], 0.0)


# --- the training gradient -------------------------------------------------------------


def _finite_difference_grads(loss, arrays, eps=1e-6):
    """Central differences of ``loss()`` with respect to every entry of ``arrays`` (in place)."""
    grads = []
    for a in arrays:
        g = np.zeros_like(a)
        for index in np.ndindex(a.shape):
            saved = a[index]
            a[index] = saved + eps
            up = loss()
            a[index] = saved - eps
            down = loss()
            a[index] = saved
            g[index] = (up - down) / (2 * eps)
        grads.append(g)
    return grads


@pytest.mark.parametrize("masked", [False, True])
def test_training_gradient_matches_finite_differences_of_numpy_reference(
    masked, rng, gradients
):
    """Autodiff of the training loop against float64 central differences of the
    NumPy reference, for the inputs, the nine weights and the initial states."""
    # Keras' JAX ops compute float64 in float32 (its type promotion caps at
    # 32 bits): there the layer runs in float32, to float32's tolerances.
    if BACKEND == "jax":
        dtype, loss_tolerance, atol = "float32", {"atol": 1e-4}, 1e-4
    else:
        dtype, loss_tolerance, atol = "float64", {"rtol": 1e-10}, 1e-6
    batch, steps, features, units = 2, 3, 3, 3
    layer = LayerNormLSTM(units, return_sequences=True, return_state=True, go_backwards=masked,
                          dtype=dtype)
    layer.build((None, None, features))
    weights = _random_weights(rng, units, features, "float64")
    layer.set_weights(weights)
    x = rng.normal(size=(batch, steps, features))
    states = [rng.normal(size=(batch, units)) if masked else np.zeros((batch, units))
              for _ in range(2)]
    mask = _ragged_mask([3, 1], steps) if masked else None
    probes = [rng.normal(size=(batch, steps, units))] + [rng.normal(size=(batch, units))] * 2

    def numpy_loss():
        sequence, final = _np_run(weights, x, states, mask, masked)
        return np.sum(sequence * probes[0]) + sum(np.sum(s * p) for s, p in zip(final, probes[1:]))

    expected = _finite_difference_grads(numpy_loss, [x, *weights, *states])

    def loss(x, *initial):
        outputs = layer(x, mask=mask, initial_state=list(initial) or None, training=True)
        return sum(ops.sum(o * ops.convert_to_tensor(p, o.dtype)) for o, p in zip(outputs, probes))

    inputs = [x, *states] if masked else [x]
    value, grads = gradients(loss, inputs, layer.trainable_weights)
    # In the order of `expected`: x, the weights, then the initial states.
    got = [grads[0], *grads[len(inputs) :], *grads[1 : len(inputs)]]
    assert len(got) == (12 if masked else 10)
    np.testing.assert_allclose(float(value), numpy_loss(), **loss_tolerance)
    for g, e in zip(got, expected[: len(got)]):
        np.testing.assert_allclose(g, e, atol=atol)


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


def test_keras_file_reloads_in_safe_mode_with_same_outputs(tmp_path, rng):
    inputs = keras.Input((None, IN))
    sequence, h, c = LayerNormLSTM(U, norm_epsilon=1e-2, return_sequences=True,
                                   return_state=True)(inputs)
    model = keras.Model(inputs, [sequence, h, c])
    for weight, value in zip(model.weights, _random_weights(rng)):
        weight.assign(value)
    x = rng.normal(size=(2, T, IN)).astype("float32")
    path = tmp_path / "layernorm_lstm.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path, safe_mode=True)
    assert reloaded.layers[1].norm_epsilon == 1e-2
    for got, want in zip(reloaded(x), model(x)):
        np.testing.assert_allclose(got, want, atol=1e-6)


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
    h = LayerNormLSTM(5, return_sequences=True)(h)
    h = LayerNormLSTM(3, go_backwards=True)(h)
    model = keras.Model(tokens, h)
    for weight in model.trainable_weights:
        weight.assign(rng.normal(0.0, 0.5, weight.shape))

    flatbuffer = convert_to_tflite(model)

    op_names = tflite_op_names(flatbuffer)
    assert not [name for name in op_names if name.startswith("CUSTOM")], op_names
    assert {"WHILE", "FULLY_CONNECTED", "SUM", "RSQRT"} <= op_names
    for shape in [(2, 7), (3, 3)]:  # another batch and another length, same file
        x = rng.integers(1, 10, size=shape).astype("int32")
        x[0, -2:] = 0  # padding
        (got,) = run_tflite(flatbuffer, x)
        np.testing.assert_allclose(got, model(x), atol=1e-5)


_OTHER_BACKEND_SCRIPT = textwrap.dedent("""
    import sys
    import keras
    import numpy as np
    from keras_seq.layers.layernorm_lstm import LayerNormLSTM

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


@pytest.mark.slow
@pytest.mark.tensorflow_only  # the check starts the other backends itself
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_other_backend_matches_numpy_reference(backend, tmp_path, rng):
    weights = _random_weights(rng)
    x = rng.normal(size=(B, T, IN)).astype("float32")
    mask = _ragged_mask([5, 3, 1])
    data, out = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(data, x=x, mask=mask, **{f"w{i}": w for i, w in enumerate(weights)})
    env = {**os.environ, "KERAS_BACKEND": backend, "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-c", _OTHER_BACKEND_SCRIPT, str(data), str(out), backend],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    expected, expected_states = _np_run(
        [w.astype("float64") for w in weights], x.astype("float64"),
        [np.zeros((B, U))] * 2, mask,
    )
    got = np.load(out)
    for k in range(2):  # inference, then training=True
        sequence, h, c = (got[f"arr_{3 * k + j}"] for j in range(3))
        np.testing.assert_allclose(sequence, expected, atol=1e-5)
        np.testing.assert_allclose(h, expected_states[0], atol=1e-5)
        np.testing.assert_allclose(c, expected_states[1], atol=1e-5)
