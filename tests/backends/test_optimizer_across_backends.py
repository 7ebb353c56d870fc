"""A model trained and saved compiled on JAX or PyTorch loads compiled under
TensorFlow, in a fresh process, with TensorFlow's own optimizer carrying the
saved state: it never imports PyTorch there (whose Triton import crashes a
TensorFlow process) and its next step is Adam's update from that state."""

import json
import os
import subprocess
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_seq._cross_backend_optimizers import TORCH_OPTIMIZER_NAMES
from keras_seq._unused_imports import python_command

BACKEND = keras.backend.backend()
LEARNING_RATE, BETA_1, BETA_2, EPSILON = 0.05, 0.9, 0.999, 1e-7
STEPS = 3
# The optimizer's variables by what they hold (their paths carry the model's
# name, which a reloaded model may spell otherwise).
ROLES = ("iteration", "learning_rate", "kernel_momentum", "kernel_velocity", "bias_momentum",
         "bias_velocity")


def _by_role(named_values):
    return {
        next(role for role in ROLES if path.endswith(role)): np.asarray(value)
        for path, value in named_values
    }


def _adam_step(weights, gradients, momentums, velocities, step):
    """Keras' Adam (Kingma & Ba 2015, with Keras' epsilon placement), step ``step`` (1-based)."""
    alpha = LEARNING_RATE * np.sqrt(1 - BETA_2**step) / (1 - BETA_1**step)
    out = []
    for w, g, m, v in zip(weights, gradients, momentums, velocities):
        m = m + (g - m) * (1 - BETA_1)
        v = v + (g * g - v) * (1 - BETA_2)
        out.append(w - alpha * m / (np.sqrt(v) + EPSILON))
    return out


def _dense_mse_gradients(kernel, bias, x, y):
    """d mean((x W + b - y)^2) / d(W, b)."""
    error = 2 * (x @ kernel + bias - y) / y.size
    return [x.T @ error, error.sum(0)]


@pytest.mark.slow
@pytest.mark.skipif(BACKEND == "tensorflow", reason="moves a model from another backend to "
                    "TensorFlow; the TensorFlow run is the receiving end")
def test_model_trained_here_continues_training_under_tensorflow(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 3)).astype("float32"), rng.normal(size=(8, 2)).astype("float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.Adam(LEARNING_RATE, BETA_1, BETA_2, EPSILON), "mse")
    model.fit(x, y, batch_size=8, epochs=STEPS, verbose=0)
    model.save(tmp_path / "model.keras")
    np.savez(tmp_path / "batch.npz", x=x, y=y)

    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [*python_command(path=str(Path(__file__).parent / "continue_under_tensorflow.py")),
         str(tmp_path)], env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["optimizer"] == "keras.src.optimizers.adam.Adam"
    assert not loaded["torch_imported"]
    assert loaded["iterations"] == STEPS + 1
    for got, saved in zip(loaded["before"], model.get_weights()):
        np.testing.assert_array_equal(got, saved)
    # The moments Keras saved on this backend are the ones TensorFlow resumes from.
    state = _by_role(loaded["state"].items())
    saved = _by_role((v.path, keras.ops.convert_to_numpy(v)) for v in model.optimizer.variables)
    assert sorted(state) == sorted(saved) == sorted(ROLES)
    for role, value in saved.items():
        np.testing.assert_allclose(state[role], value, rtol=1e-6, err_msg=role)
    kernel, bias = model.get_weights()
    expected = _adam_step(
        [kernel, bias], _dense_mse_gradients(kernel, bias, x, y),
        [saved["kernel_momentum"], saved["bias_momentum"]],
        [saved["kernel_velocity"], saved["bias_velocity"]], STEPS + 1,
    )
    for got, want in zip(loaded["after"], expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(BACKEND != "torch", reason="lists what Keras' PyTorch backend replaces")
def test_every_optimizer_the_torch_backend_replaces_is_registered():
    replaced = []
    for name in dir(keras.optimizers):
        cls = getattr(keras.optimizers, name)
        if isinstance(cls, type) and issubclass(cls, keras.optimizers.Optimizer):
            try:
                instance = cls()
            except TypeError:  # wrappers that need an inner optimizer
                continue
            if type(instance) is not cls:
                replaced.append(name)
    assert replaced and sorted(replaced) == sorted(TORCH_OPTIMIZER_NAMES)
    registered = keras.saving.get_custom_objects()
    assert all(registered[name] is getattr(keras.optimizers, name) for name in replaced)
