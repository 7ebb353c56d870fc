"""NTMCell and NTM against a NumPy transcription of Graves et al. 2014, §3."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from keras_seq import layers
from keras_seq.layers.recurrent.ntm import cosine_similarity, sharpen

IN = 3


# --- NumPy reference, written from the paper's equations (§3.1-3.3) -------------------


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softplus(x):
    return np.log1p(np.exp(x))


def _softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def _np_address(memory, w_prev, k, beta, g, s, gamma, shift_range):
    """One head, one example: content, interpolation, shift, sharpening."""
    n = memory.shape[0]
    cosine = np.array(
        [k @ memory[i] / (np.linalg.norm(k) * np.linalg.norm(memory[i])) for i in range(n)]
    )
    w_c = _softmax(beta * cosine)  # (5)
    w_g = g * w_c + (1.0 - g) * w_prev  # (7)
    w_tilde = np.array([  # (8): Σ_j w_g(j) s(i − j), i − j taken modulo N
        sum(w_g[j] * s[d + shift_range]
            for j in range(n) for d in range(-shift_range, shift_range + 1)
            if (i - j - d) % n == 0)
        for i in range(n)
    ])
    return w_tilde**gamma / np.sum(w_tilde**gamma)  # (9)


def _np_step(cell, weights, x, states):
    """One NTM step for a batch, head by head and example by example."""
    kernel, recurrent_kernel, bias, head_kernel, head_bias, output_kernel, output_bias = weights
    n, width, S = cell.memory_size, cell.memory_width, cell.shift_range
    R, H_w = cell.num_read_heads, cell.num_write_heads
    h, c, r, w, memory = states
    batch = x.shape[0]
    memory = memory.reshape(batch, n, width)
    w = w.reshape(batch, R + H_w, n)
    clip = cell.clip_value

    z = x @ kernel + np.concatenate([h, r], -1) @ recurrent_kernel + bias
    z_i, z_f, z_c, z_o = np.split(z, 4, axis=-1)
    c = _sigmoid(z_f) * c + _sigmoid(z_i) * np.tanh(z_c)
    h = _sigmoid(z_o) * np.tanh(c)
    p = np.clip(h @ head_kernel + head_bias, -clip, clip)

    A = width + 2 * S + 4
    new_w = np.zeros_like(w)
    for head in range(R + H_w):
        q = p[:, head * A : (head + 1) * A]
        for b in range(batch):
            new_w[b, head] = _np_address(
                memory[b], w[b, head], np.tanh(q[b, :width]), _softplus(q[b, width]),
                _sigmoid(q[b, width + 1]), _softmax(q[b, width + 2 : width + 3 + 2 * S]),
                1.0 + _softplus(q[b, -1]), S,
            )
    reads = np.stack([np.einsum("bn,bnw->bw", new_w[:, head], memory) for head in range(R)], 1)

    erase, add = np.ones_like(memory), np.zeros_like(memory)
    for j in range(H_w):
        q = p[:, (R + H_w) * A + 2 * width * j :]
        e, a = _sigmoid(q[:, :width]), np.tanh(q[:, width : 2 * width])
        w_j = new_w[:, R + j, :, None]
        erase = erase * (1.0 - w_j * e[:, None, :])  # (3), each head
        add = add + w_j * a[:, None, :]  # (4)
    memory = memory * erase + add

    r = reads.reshape(batch, -1)
    y = np.clip(np.concatenate([h, r], -1) @ output_kernel + output_bias, -clip, clip)
    return y, [h, c, r, new_w.reshape(batch, -1), memory.reshape(batch, -1)]


def _np_initial_state(cell, initial_read, batch):
    n, width, heads = cell.memory_size, cell.memory_width, cell.num_read_heads + cell.num_write_heads
    w = np.zeros((batch, heads, n))
    w[:, :, 0] = 1.0
    return [
        np.zeros((batch, cell.units)),
        np.zeros((batch, cell.units)),
        np.tile(np.tanh(initial_read).reshape(1, -1), (batch, 1)),
        w.reshape(batch, -1),
        np.full((batch, n * width), cell.initial_memory),
    ]


def _np_run(cell, weights, x, mask=None, go_backwards=False, states=None):
    """Keras semantics: masked steps keep the states and repeat the previous output."""
    *step_weights, initial_read = weights
    if states is None:
        states = _np_initial_state(cell, initial_read, x.shape[0])
    output = np.zeros((x.shape[0], cell.output_size))
    outputs = []
    steps = reversed(range(x.shape[1])) if go_backwards else range(x.shape[1])
    for t in steps:
        new_output, new_states = _np_step(cell, step_weights, x[:, t], states)
        if mask is not None:
            keep = mask[:, t, None]
            new_states = [np.where(keep, n, s) for n, s in zip(new_states, states)]
            new_output = np.where(keep, new_output, output)
        output, states = new_output, new_states
        outputs.append(output)
    return np.stack(outputs, 1), states


# --- helpers -------------------------------------------------------------------------


CONFIGS = {
    "shift1": dict(controller_units=6, memory_size=7, memory_width=4, num_read_heads=2,
                   num_write_heads=1, shift_range=1, output_size=5),
    "shift2": dict(controller_units=5, memory_size=6, memory_width=3, num_read_heads=1,
                   num_write_heads=2, shift_range=2),
}


def _randomize(layer, seed=0, scale=0.5):
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(rng.normal(0.0, scale, weight.shape).astype(weight.dtype))
    return [np.asarray(w, dtype="float64") for w in layer.get_weights()]


def _random_states(cell, batch, rng):
    """States anywhere in the state space: random memory and normalised weightings."""
    heads = cell.num_read_heads + cell.num_write_heads
    w = rng.uniform(0.0, 1.0, (batch, heads, cell.memory_size))
    w /= w.sum(-1, keepdims=True)
    return [
        rng.normal(0, 0.5, (batch, cell.units)),
        rng.normal(0, 0.5, (batch, cell.units)),
        rng.normal(0, 0.5, (batch, cell.num_read_heads * cell.memory_width)),
        w.reshape(batch, -1),
        rng.normal(0, 0.5, (batch, cell.memory_size * cell.memory_width)),
    ]


def _close(got, want, atol=2e-5):
    np.testing.assert_allclose(np.asarray(got, dtype="float64"), want, atol=atol, rtol=1e-4)


# --- numerics ------------------------------------------------------------------------


@pytest.mark.parametrize("config", list(CONFIGS))
def test_one_step_matches_numpy_equations(config):
    cell = layers.NTMCell(**CONFIGS[config])
    cell.build((None, IN))
    *weights, _ = _randomize(cell)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, IN))
    states = _random_states(cell, 3, rng)
    y, new_states = cell(x.astype("float32"), [s.astype("float32") for s in states])
    want_y, want_states = _np_step(cell, weights, x, states)
    _close(y, want_y)
    for got, want in zip(new_states, want_states):
        _close(got, want)


@pytest.mark.parametrize("loop", ["convertible", "tensor_array", "unrolled"])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_several_steps_match_numpy_in_every_loop(config, loop):
    unroll, training = loop == "unrolled", loop == "tensor_array"
    layer = layers.NTM(**CONFIGS[config], return_sequences=True, return_state=True,
                       unroll=unroll)
    x = np.random.default_rng(2).normal(size=(2, 6, IN))
    layer.build(x.shape)
    weights = _randomize(layer)
    sequence, *states = layer(x.astype("float32"), training=training)
    want_sequence, want_states = _np_run(layer.cell, weights, x)
    _close(sequence, want_sequence)
    for got, want in zip(states, want_states):
        _close(got, want)


def test_mask_and_go_backwards_match_numpy():
    layer = layers.NTM(**CONFIGS["shift1"], return_sequences=True, return_state=True,
                       go_backwards=True)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 7, IN))
    mask = np.ones((3, 7), bool)
    mask[0, 4:] = False  # right padding
    mask[1, :2] = False  # left padding
    layer.build(x.shape)
    weights = _randomize(layer)
    sequence, *states = layer(x.astype("float32"), mask=mask)
    want_sequence, want_states = _np_run(layer.cell, weights, x, mask, go_backwards=True)
    _close(sequence, want_sequence)
    for got, want in zip(states, want_states):
        _close(got, want)


def _cell_in_keras_rnn_equals_the_layer(mask):
    layer = layers.NTM(**CONFIGS["shift2"], return_sequences=True, return_state=True)
    x = np.random.default_rng(4).normal(size=(2, 9, IN)).astype("float32")
    layer.build(x.shape)
    _randomize(layer)
    rnn = keras.layers.RNN(layer.cell, return_sequences=True, return_state=True)
    for got, want in zip(rnn(x, mask=mask), layer(x, mask=mask)):
        _close(got, np.asarray(want, dtype="float64"), atol=1e-6)


def test_cell_in_keras_rnn_equals_the_layer():
    _cell_in_keras_rnn_equals_the_layer(mask=None)


# Keras' JAX and PyTorch rnn loops repeat a masked step's output from the first
# state (h), not from the cell's output y, so RNN(NTMCell) with a mask is only
# right on TensorFlow; the NTM layer itself is tested with masks everywhere.
@pytest.mark.tensorflow_only
def test_cell_in_keras_rnn_with_a_mask_equals_the_layer():
    _cell_in_keras_rnn_equals_the_layer(mask=np.arange(9)[None, :] < np.array([[9], [5]]))


@pytest.mark.slow
def test_fit_through_autodiff_lowers_the_loss():
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(5)
    x = rng.integers(0, 2, size=(32, 6, 3)).astype("float32")
    y = x[:, ::-1]  # reverse the sequence: needs the memory, or at least the state
    inputs = keras.Input((6, 3))
    h = layers.NTM(16, memory_size=8, memory_width=4, output_size=3,
                   return_sequences=True)(inputs)
    model = keras.Model(inputs, h)
    model.compile(keras.optimizers.Adam(0.01), "mse")
    first = model.evaluate(x, y, verbose=0)
    model.fit(x, y, epochs=15, batch_size=16, verbose=0)
    assert model.evaluate(x, y, verbose=0) < 0.8 * first


def test_initial_state_argument_is_used_and_states_come_back_in_order():
    layer = layers.NTM(**CONFIGS["shift1"], return_state=True)
    rng = np.random.default_rng(6)
    x = rng.normal(size=(2, 4, IN))
    layer.build(x.shape)
    weights = _randomize(layer)
    states = _random_states(layer.cell, 2, rng)
    output, *got = layer(x.astype("float32"), initial_state=[s.astype("float32") for s in states])
    want_sequence, want_states = _np_run(layer.cell, weights, x, states=states)
    _close(output, want_sequence[:, -1])
    assert [s.shape[-1] for s in got] == layer.cell.state_size
    for g, w in zip(got, want_states):
        _close(g, w)


def test_weights_trained_with_one_memory_size_run_with_another():
    small = layers.NTM(**CONFIGS["shift1"], return_sequences=True)
    large = layers.NTM(**{**CONFIGS["shift1"], "memory_size": 12}, return_sequences=True)
    x = np.random.default_rng(7).normal(size=(2, 5, IN))
    small.build(x.shape)
    large.build(x.shape)
    large.set_weights(small.get_weights())  # same shapes: no weight depends on N
    weights = _randomize(small)
    large.set_weights(small.get_weights())
    want, _ = _np_run(large.cell, weights, x)
    _close(large(x.astype("float32")), want)


def test_bidirectional_joins_the_forward_and_backward_runs():
    bi = keras.layers.Bidirectional(layers.NTM(**CONFIGS["shift2"], return_sequences=True))
    x = np.random.default_rng(8).normal(size=(2, 5, IN))
    bi.build(x.shape)
    _randomize(bi)
    forward, _ = _np_run(bi.forward_layer.cell, [np.float64(w) for w in
                                                 bi.forward_layer.get_weights()], x)
    backward, _ = _np_run(bi.backward_layer.cell, [np.float64(w) for w in
                                                   bi.backward_layer.get_weights()], x,
                          go_backwards=True)
    _close(bi(x.astype("float32")), np.concatenate([forward, backward[:, ::-1]], -1))


def test_stateful_carries_the_state_and_reset_returns_to_the_initial_state():
    layer = layers.NTM(**CONFIGS["shift1"], stateful=True, return_sequences=True)
    x = np.random.default_rng(9).normal(size=(2, 8, IN))
    layer.build((2, 4, IN))
    weights = _randomize(layer)
    layer.reset_state()  # the state variables were made from the old initial_read
    want, _ = _np_run(layer.cell, weights, x)
    first = layer(x[:, :4].astype("float32"))
    second = layer(x[:, 4:].astype("float32"))
    _close(np.concatenate([first, second], 1), want)
    layer.reset_state()
    _close(layer(x[:, :4].astype("float32")), want[:, :4])


class _Compiled(keras.Model):
    """``fn(x)`` as a model: ``predict_on_batch`` runs it compiled where the
    backend compiles (tf.function), which the hundreds of central differences need."""

    def __init__(self, fn, layer):
        super().__init__(dtype=layer.dtype_policy, name="compiled_loss")
        self.layer, self.fn = layer, fn

    def call(self, x):
        return self.fn(x)


# Keras 3.15 promotes float64 with a Python float to float32
# (keras.src.backend.common.dtypes.result_type), so ops.tanh of a float64
# tensor is float32 on JAX, even in 64-bit mode: no float64 forward pass there.
@pytest.mark.skipif(keras.backend.backend() == "jax",
                    reason="Keras' ops.tanh computes float64 in float32 on JAX")
def test_gradients_match_float64_central_differences(gradients):
    """Autodiff of the training loop (inputs and every weight, through the learned
    initial read vectors too) against central differences of the float64 layer."""
    layer = layers.NTM(3, memory_size=5, memory_width=3, num_read_heads=2, num_write_heads=1,
                       shift_range=1, output_size=2, return_sequences=True, return_state=True,
                       dtype="float64")
    rng = np.random.default_rng(10)
    x = rng.normal(size=(2, 4, 2))
    layer.build(x.shape)
    _randomize(layer, scale=0.7)
    outputs = layer(x)
    projections = [rng.normal(size=o.shape) for o in outputs]

    def loss_per_example(x):
        return sum(ops.sum(ops.reshape(ops.multiply(o, p), (ops.shape(o)[0], -1)), axis=1)
                   for o, p in zip(layer(x, training=True), projections))

    _, (x_grad, *grads) = gradients(lambda x: ops.sum(loss_per_example(x)), [x],
                                    layer.trainable_weights)
    compiled = _Compiled(loss_per_example, layer)

    def loss(x):
        return float(np.sum(compiled.predict_on_batch(x)))

    eps = 1e-6

    def central(f, array):
        numeric = np.zeros_like(array)
        for index in np.ndindex(array.shape):
            plus, minus = array.copy(), array.copy()
            plus[index] += eps
            minus[index] -= eps
            numeric[index] = (f(plus) - f(minus)) / (2 * eps)
        return numeric

    def assign_and_loss(variable, original):
        def f(value):
            variable.assign(value)
            result = loss(x)
            variable.assign(original)
            return result
        return f

    np.testing.assert_allclose(x_grad, central(loss, x), rtol=1e-5, atol=1e-8)
    for variable, grad in zip(layer.trainable_weights, grads):
        original = ops.convert_to_numpy(variable)
        np.testing.assert_allclose(grad, central(assign_and_loss(variable, original), original),
                                   rtol=1e-5, atol=1e-8, err_msg=variable.name)


# --- nothing produces NaN ------------------------------------------------------------


def test_cosine_of_zero_vectors_and_sharpening_of_zero_weights_are_finite(gradients):
    k = np.zeros((1, 2, 3), "float32")
    memory = np.zeros((1, 4, 3), "float32")
    weights = np.zeros((1, 2, 4), "float32")
    gamma = np.full((1, 2, 1), 2.5, "float32")
    np.testing.assert_array_equal(cosine_similarity(k, memory), 0.0)
    np.testing.assert_allclose(sharpen(weights, gamma), 0.25)  # all equal: uniform
    scale = np.array([1.0, 2.0, 3.0, 4.0], "float32")

    def total(k, memory, weights, gamma):
        return ops.sum(ops.multiply(cosine_similarity(k, memory), scale)) + ops.sum(
            ops.multiply(sharpen(weights, gamma), scale))

    _, grads = gradients(total, [k, memory, weights, gamma])
    for grad in grads:
        assert np.all(np.isfinite(grad))


@pytest.mark.parametrize("zero_initial_state", [False, True])
@pytest.mark.parametrize("scale", [0.0, 30.0])
def test_zero_state_and_extreme_weights_give_finite_values_and_gradients(
    scale, zero_initial_state, gradients
):
    """All-zero memory, reads and weightings; zero weights (zero keys) or huge
    ones (every head parameter clipped, one-hot weightings)."""
    layer = layers.NTM(**CONFIGS["shift2"], initial_memory=0.0, return_sequences=True)
    x = np.random.default_rng(11).normal(size=(2, 5, IN)).astype("float32")
    layer.build(x.shape)
    _randomize(layer, scale=scale)
    initial_state = None
    if zero_initial_state:
        initial_state = [np.zeros((2, size), "float32") for size in layer.cell.state_size]
    y = layer(x, initial_state=initial_state, training=True)
    assert np.all(np.isfinite(np.asarray(y)))
    _, grads = gradients(
        lambda x: ops.sum(layer(x, initial_state=initial_state, training=True)),
        [x],
        layer.trainable_weights,
    )
    for grad in grads:
        assert grad is None or np.all(np.isfinite(grad))


def test_mixed_precision_is_finite_and_close_to_float32(gradients):
    x = np.random.default_rng(12).normal(size=(2, 6, IN)).astype("float32")
    full = layers.NTM(**CONFIGS["shift1"], return_sequences=True)
    mixed = layers.NTM(**CONFIGS["shift1"], return_sequences=True, dtype="mixed_float16")
    full.build(x.shape)
    mixed.build(x.shape)
    mixed.set_weights(_randomize(full, scale=0.3))
    y = mixed(x, training=True)
    assert keras.backend.standardize_dtype(y.dtype) == "float16"
    _, grads = gradients(
        lambda: ops.sum(ops.cast(mixed(x, training=True), "float32") ** 2),
        variables=mixed.trainable_weights,
    )
    assert all(np.all(np.isfinite(g)) for g in grads)
    np.testing.assert_allclose(ops.convert_to_numpy(ops.cast(y, "float32")), full(x), atol=3e-2)


# --- saving, arguments -----------------------------------------------------------------


def test_keras_file_round_trip_with_safe_mode(tmp_path):
    inputs = keras.Input((None, IN))
    h = keras.layers.Bidirectional(
        layers.NTM(**CONFIGS["shift2"], return_sequences=True, clip_value=None)
    )(inputs)
    outputs = layers.NTM(**CONFIGS["shift1"], use_bias=False, go_backwards=True)(h)
    x = np.random.default_rng(13).normal(size=(2, 5, IN)).astype("float32")
    outputs = keras.layers.Concatenate()(
        [outputs, keras.layers.RNN(layers.NTMCell(**CONFIGS["shift1"]))(inputs)]
    )
    model = keras.Model(inputs, outputs)
    _randomize(model)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    np.testing.assert_array_equal(loaded(x), model(x))
    ntm = [layer for layer in model.layers if isinstance(layer, layers.NTM)][0]
    assert loaded.get_layer(ntm.name).get_config() == ntm.get_config()
    assert [w.name for w in ntm.weights] == [
        "kernel", "recurrent_kernel", "head_kernel", "output_kernel", "initial_read"]


@pytest.mark.parametrize(
    "kwargs, error, argument",
    [
        (dict(controller_units=0), ValueError, "controller_units"),
        (dict(controller_units="8"), TypeError, "controller_units"),
        (dict(memory_size=0), ValueError, "memory_size"),
        (dict(memory_width=2.5), ValueError, "memory_width"),
        (dict(num_read_heads=0), ValueError, "num_read_heads"),
        (dict(num_write_heads=True), TypeError, "num_write_heads"),
        (dict(shift_range=-1), ValueError, "shift_range"),
        (dict(memory_size=4, shift_range=2), ValueError, "shift_range"),
        (dict(output_size=0), ValueError, "output_size"),
        (dict(clip_value=0.0), ValueError, "clip_value"),
        (dict(clip_value="20"), TypeError, "clip_value"),
        (dict(initial_memory=2.0), ValueError, "initial_memory"),
        (dict(unit_forget_bias=1), TypeError, "unit_forget_bias"),
        (dict(dropout=1.0), ValueError, "dropout"),
    ],
)
@pytest.mark.parametrize("cls", [layers.NTM, layers.NTMCell])
def test_bad_arguments_are_rejected_naming_the_argument(cls, kwargs, error, argument):
    kwargs = {"controller_units": 8, **kwargs}
    with pytest.raises(error, match=rf"^{cls.__name__}: invalid \w+ for argument `{argument}`"):
        cls(**kwargs)


def test_dropout_and_recurrent_dropout_act_only_in_training():
    layer = layers.NTM(**CONFIGS["shift1"], dropout=0.5, recurrent_dropout=0.5, seed=1,
                       return_sequences=True)
    x = np.random.default_rng(14).normal(size=(2, 5, IN)).astype("float32")
    inference = np.asarray(layer(x))
    rnn = keras.layers.RNN(layer.cell, return_sequences=True)
    np.testing.assert_allclose(rnn(x), inference, atol=1e-6)
    for trained in (layer(x, training=True), rnn(x, training=True)):
        trained = np.asarray(trained)
        assert np.all(np.isfinite(trained))
        assert np.max(np.abs(trained - inference)) > 1e-3


def test_initial_state_of_the_wrong_width_is_rejected_before_computing():
    layer = layers.NTM(**CONFIGS["shift1"])
    states = [np.zeros((2, size), "float32") for size in layer.cell.state_size]
    states[-1] = np.zeros((2, 5), "float32")
    with pytest.raises(ValueError, match="`initial_state`.*state 4"):
        layer(np.zeros((2, 3, IN), "float32"), initial_state=states)
