"""Every hand-written derivative against autodiff of its cell's ``step``.

A cell's ``manual_gradient()`` (`keras_seq.layers.recurrent.manual_gradient`)
is a second form of its step: the step written to keep what its derivative
needs, and that derivative in closed form. For every public cell that has
one (found by asking each cell, not from a list), one step of ``forward``
must give ``step``'s new states, and ``backward`` the gradients that the
backend's autodiff of ``step`` gives, for the inputs, the states and every
weight. (On TensorFlow: the derivatives train there alone; they are
written in ``keras.ops`` and pass on JAX and PyTorch too.)
"""

import keras
import numpy as np
import pytest
from conftest import BACKEND
from keras import ops

from keras_seq import layers
from keras_seq.layers.recurrent.fast_paths import declared_form
from keras_seq.layers.recurrent.manual_gradient import ManualGradient

B, IN, U = 3, 5, 4
# Arguments a public cell needs beyond `units`, and configurations worth their own case.
CONFIGURATIONS = {
    layers.CoupledGateLSTMCell: [{}, {"use_peepholes": True}],
    layers.GRUCell: [{}, {"reset_after": False}, {"use_bias": False}],
    layers.PeepholeLSTMCell: [{}, {"use_bias": False}],
    layers.RGLRUCell: [{"input": U}],
    layers.RecurrentBlock: [{"input": U}],
    layers.NTMCell: [{"memory_size": 4, "memory_width": 2}],
}
# Keras' JAX ops compute float64 in float32: there the check runs in float32;
# some of Keras' PyTorch ops round float64 to float32's precision.
DTYPE, ATOL = {"jax": ("float32", 2e-5), "torch": ("float64", 1e-6)}.get(
    BACKEND, ("float64", 1e-10))


def _public_cells():
    """``(name, cell)`` for every public RecurrentCell class and configuration."""
    cells = []
    for name in layers.__all__:
        cls = getattr(layers, name)
        if not (isinstance(cls, type) and issubclass(cls, layers.RecurrentCell)):
            continue
        if cls in (layers.RecurrentCell, layers.AttentionWrapper):
            continue  # the protocol, and a wrapper (a step around another cell's)
        for config in CONFIGURATIONS.get(cls, [{}]):
            config = dict(config)
            features = config.pop("input", IN)
            kwargs = {"num_heads": 2} if "num_heads" in cls.__init__.__code__.co_varnames else {}
            cell = cls(U, dtype=DTYPE, **kwargs, **config)
            cell.build((None, features))
            cells.append((f"{name}{config or ''}", cell, features))
    return cells


def _with_derivative():
    found = []
    for name, cell, features in _public_cells():
        make = declared_form(cell, "manual_gradient")
        gradient = None if make is None else make()
        if gradient is not None and gradient.supported():
            found.append(pytest.param(cell, features, gradient, id=name))
    return found


CASES = _with_derivative()
pytestmark = pytest.mark.tensorflow_only


def test_the_cells_with_a_derivative_are_found_by_asking_them():
    names = {case.id for case in CASES}
    assert names == {
        "CoupledGateLSTMCell", "CoupledGateLSTMCell{'use_peepholes': True}", "GRUCell",
        "GRUCell{'use_bias': False}", "LayerNormLSTMCell", "PeepholeLSTMCell",
        "PeepholeLSTMCell{'use_bias': False}",
    }
    assert all(isinstance(case.values[2], ManualGradient) for case in CASES)


@pytest.mark.parametrize("cell, features, gradient", CASES)
def test_forward_and_backward_equal_step_and_its_autodiff(cell, features, gradient, rng,
                                                          gradients):
    for weight in cell.weights:
        weight.assign(rng.normal(0.0, 0.5, weight.shape))
    n_states = len(keras.tree.flatten(cell.state_size))
    x = rng.normal(size=(B, features)).astype(DTYPE)
    states = [rng.normal(size=(B, U)).astype(DTYPE) for _ in range(n_states)]
    probes = [rng.normal(size=(B, U)).astype(DTYPE) for _ in range(n_states)]

    # forward == step
    tensors = [ops.convert_to_tensor(s) for s in states]
    xw = gradient.project(ops.convert_to_tensor(x[None]))[0]
    kernel, *params = gradient.weights()
    new_states, saved = gradient.forward(xw, ops.matmul(tensors[0], kernel), tensors, params)
    projected = ops.squeeze(cell.project(ops.convert_to_tensor(x[:, None])), 1)
    _, expected_states = cell.step(projected, tensors)
    for got, want in zip(new_states, expected_states):
        np.testing.assert_allclose(ops.convert_to_numpy(got), ops.convert_to_numpy(want),
                                   atol=ATOL)

    # autodiff of step: the gradients of Σ probe ⊙ new state.
    def step_loss(x, *states):
        projected = ops.squeeze(cell.project(ops.expand_dims(x, 1)), 1)
        _, new = cell.step(projected, list(states))
        return sum(ops.sum(s * ops.convert_to_tensor(p)) for s, p in zip(new, probes))

    _, expected = gradients(step_loss, [x, *states], cell.trainable_weights)

    # backward, carried to x and the weights through the derivative's own
    # (linear) projection and weight reading, with its outputs as constants.
    d_xw, d_r, d_prev, d_params = gradient.backward(
        saved, tensors, new_states, [ops.convert_to_tensor(p) for p in probes], params)
    # Constants: the gradient flows through the linear maps below only.
    d_xw, d_r = ops.stop_gradient(d_xw), ops.stop_gradient(d_r)
    d_prev = [None if d is None else ops.stop_gradient(d) for d in d_prev]
    d_params = [ops.stop_gradient(ops.sum(d, axis=0)) for d in d_params]

    def carried(x, *states):
        xw = gradient.project(ops.expand_dims(x, 0))[0]
        kernel, *params = gradient.weights()
        total = ops.sum(xw * d_xw) + ops.sum(ops.matmul(states[0], kernel) * d_r)
        total += sum(ops.sum(s * d) for s, d in zip(states, d_prev) if d is not None)
        return total + sum(ops.sum(p * d) for p, d in zip(params, d_params))

    _, got = gradients(carried, [x, *states], cell.trainable_weights)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        if e is None:
            assert g is None or not np.any(g)
            continue
        np.testing.assert_allclose(g, e, atol=ATOL * max(1.0, float(np.abs(e).max())))
