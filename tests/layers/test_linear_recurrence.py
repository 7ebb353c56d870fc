"""The linear recurrence h_t = a_t ⊙ h_{t-1} + b_t of the parallel
recurrences, in every form a backend runs it, against a NumPy loop."""

import keras
import numpy as np
import pytest
from finite_differences import finite_difference_grads

from keras_seq.layers.recurrent import backend
from keras_seq.layers.recurrent.linear_recurrence import linear_recurrence


def numpy_recurrence(a, b, h0, mask=None):
    h, out = h0.astype("float64"), np.zeros(b.shape)
    for t in range(b.shape[1]):
        new = a[:, t] * h + b[:, t]
        h = new if mask is None else np.where(mask[:, t, None], new, h)
        out[:, t] = h
    return out


def numpy_gradients(a, b, h0, weights):
    """∂/∂(a, b, h0) of Σ weights ⊙ h, by central differences in float64."""
    args = [a.astype("float64"), b.astype("float64"), h0.astype("float64")]
    return finite_difference_grads(
        lambda: float(np.sum(weights * numpy_recurrence(*args))), args)


def coefficients(rng, steps=11, batch=2, width=3):
    a = rng.uniform(0.2, 1.1, (batch, steps, width)).astype("float32")
    b = rng.normal(size=(batch, steps, width)).astype("float32")
    h0 = rng.normal(size=(batch, width)).astype("float32")
    return a, b, h0


def test_the_layers_recurrence_with_a_mask_and_initial_state(rng):
    a, b, h0 = coefficients(rng)
    mask = rng.uniform(size=a.shape[:2]) > 0.3
    got = keras.ops.convert_to_numpy(linear_recurrence(a, b, h0, mask))
    np.testing.assert_allclose(got, numpy_recurrence(a, b, h0, mask), rtol=1e-5, atol=1e-5)


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("parallel", [False, True], ids=["loop", "doubling scan"])
@pytest.mark.parametrize("mode", ["eager", "graph, dynamic length", "xla"])
def test_tensorflow_forms_and_their_gradients(parallel, mode, rng):
    import tensorflow as tf

    from keras_seq.layers.recurrent.backend_tensorflow import _differentiable_linear_scan

    a, b, h0 = coefficients(rng)
    weights = rng.normal(size=b.shape)

    def run(a, b, h0):
        with tf.GradientTape() as tape:
            tape.watch([a, b, h0])
            h = _differentiable_linear_scan(a, b, h0, parallel)
            loss = tf.reduce_sum(tf.cast(weights, tf.float32) * h)
        return h, tape.gradient(loss, [a, b, h0])

    if mode != "eager":
        spec = [tf.TensorSpec((None, None, 3)), tf.TensorSpec((None, None, 3)),
                tf.TensorSpec((None, 3))]
        run = tf.function(run, input_signature=spec, jit_compile=mode == "xla")
    h, grads = run(tf.constant(a), tf.constant(b), tf.constant(h0))
    np.testing.assert_allclose(h.numpy(), numpy_recurrence(a, b, h0), rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, numpy_gradients(a, b, h0, weights)):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(backend.BACKEND != "torch", reason="PyTorch's forms")
@pytest.mark.parametrize("doubling", [False, True], ids=["loop", "doubling scan"])
def test_torch_forms_and_their_gradients(doubling, rng, monkeypatch):
    import torch

    from keras_seq.layers.recurrent import backend_torch

    if doubling:  # the GPU's form, run here on the CPU
        monkeypatch.setattr(backend_torch, "_steps_for", lambda device: backend_torch._doubling_steps)
    a, b, h0 = coefficients(rng)
    weights = rng.normal(size=b.shape)
    leaves = [torch.tensor(x, requires_grad=True) for x in (a, b, h0)]
    h = backend_torch._LinearScan.apply(*leaves)
    (torch.tensor(weights, dtype=torch.float32) * h).sum().backward()
    np.testing.assert_allclose(h.detach().numpy(), numpy_recurrence(a, b, h0), rtol=1e-5,
                               atol=1e-5)
    for leaf, want in zip(leaves, numpy_gradients(a, b, h0, weights)):
        np.testing.assert_allclose(leaf.grad.numpy(), want, rtol=1e-4, atol=1e-4)
