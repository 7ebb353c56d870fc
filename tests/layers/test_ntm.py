"""NTMCell and NTM against a NumPy transcription of Graves et al. 2014, §3."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_seq import layers

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


def _np_run(cell, weights, x, mask=None, go_backwards=False):
    """Keras semantics: masked steps keep the states and repeat the previous output."""
    *step_weights, initial_read = weights
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


def test_cell_in_keras_rnn_equals_the_layer():
    layer = layers.NTM(**CONFIGS["shift2"], return_sequences=True, return_state=True)
    x = np.random.default_rng(4).normal(size=(2, 9, IN)).astype("float32")
    mask = np.arange(9)[None, :] < np.array([[9], [5]])
    layer.build(x.shape)
    _randomize(layer)
    rnn = keras.layers.RNN(layer.cell, return_sequences=True, return_state=True)
    for got, want in zip(rnn(x, mask=mask), layer(x, mask=mask)):
        _close(got, np.asarray(want, dtype="float64"), atol=1e-6)


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
