"""A user's linear cell, written as ``project`` + ``coefficients`` only, gets everything.

The cell is QRNN's f-pooling (Bradbury et al. 2017), taken from the last
code block of docs/guides/write_your_own_cell.md: it defines neither
``step`` nor ``parallel``; the base class derives both from its
coefficients. It is checked against NumPy written from the paper's
equations, at inference (the derived step) and in training (the derived
parallel form, and its gradient against finite differences), with masks,
``go_backwards``, initial states, ``Bidirectional`` and ``.keras`` files,
on every backend; on TensorFlow it streams chunk by chunk (its exports are
in ``test_every_layer_exports.py``).
"""

import pathlib
import re

import keras
import numpy as np
import pytest
from conftest import BACKEND
from finite_differences import finite_difference_grads
from keras import ops

from keras_seq import layers
from keras_seq.layers.recurrent import fast_paths

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "guides" / "write_your_own_cell.md"
B, T, IN, U = 3, 6, 4, 5
MASK = np.arange(T)[None, :] < np.array([[6], [3], [1]])


def _cell_class():
    """``QRNNCell`` from the page's last Python block, as a user would paste it."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    code = "import keras\nimport numpy as np\nfrom keras import ops\n" \
           "from keras_seq.layers import RNN, RecurrentCell\n" + blocks[-1]
    namespace = {"__name__": "qrnn_from_docs"}
    exec(compile(code, str(DOC), "exec"), namespace)
    return namespace["QRNNCell"]


QRNNCell = _cell_class()


def _numpy_qrnn(weights, x, h0=None, mask=None, go_backwards=False):
    """f = σ(x W_f + b_f), z = tanh(x W_z + b_z), h_t = f ⊙ h_{t−1} + (1 − f) ⊙ z;
    a masked step keeps h and repeats the last output; processing order."""
    kernel, bias = (w.astype("float64") for w in weights)
    W_f, W_z = np.split(kernel, 2, axis=1)
    b_f, b_z = np.split(bias, 2)
    h = np.zeros((x.shape[0], U)) if h0 is None else h0.astype("float64")
    output, outputs = np.zeros_like(h), []
    for t in (range(x.shape[1] - 1, -1, -1) if go_backwards else range(x.shape[1])):
        x_t = x[:, t].astype("float64")
        f = 1.0 / (1.0 + np.exp(-(x_t @ W_f + b_f)))
        new = f * h + (1.0 - f) * np.tanh(x_t @ W_z + b_z)
        keep = np.ones((x.shape[0], 1), bool) if mask is None else mask[:, t, None]
        h, output = np.where(keep, new, h), np.where(keep, new, output)
        outputs.append(output)
    return np.stack(outputs, 1), h


def _layer(rng, dtype="float32", **kwargs):
    layer = layers.RNN(QRNNCell(U, dtype=dtype), dtype=dtype, **kwargs)
    layer.build((None, None, IN))
    weights = [rng.normal(0.0, 0.5, w.shape) for w in layer.get_weights()]
    layer.set_weights(weights)
    return layer, weights


def test_the_cell_defines_only_project_and_coefficients():
    assert "step" not in vars(QRNNCell) and "parallel" not in vars(QRNNCell)
    assert fast_paths.training_form(QRNNCell(U), False) == fast_paths.PARALLEL


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("go_backwards", [False, True])
def test_derived_step_and_parallel_form_match_numpy(training, go_backwards, rng):
    layer, weights = _layer(rng, return_sequences=True, return_state=True,
                            go_backwards=go_backwards)
    x = rng.normal(size=(B, T, IN)).astype("float32")
    h0 = rng.normal(size=(B, U)).astype("float32")
    sequence, h = layer(x, mask=MASK, initial_state=[h0], training=training)
    expected, expected_h = _numpy_qrnn(weights, x, h0, MASK, go_backwards)
    np.testing.assert_allclose(np.asarray(sequence), expected, atol=1e-5)
    np.testing.assert_allclose(np.asarray(h), expected_h, atol=1e-5)


def test_parallel_training_gradient_matches_finite_differences(rng, gradients):
    # Keras' JAX ops compute float64 in float32; some of its PyTorch ops round to it.
    dtype, atol = {"jax": ("float32", 1e-4), "torch": ("float64", 1e-6)}.get(
        BACKEND, ("float64", 1e-7))
    layer, weights = _layer(rng, dtype=dtype, return_sequences=True, go_backwards=True)
    weights = [w.astype("float64") for w in weights]
    x = rng.normal(size=(B, T, IN))
    probe = rng.normal(size=(B, T, U))

    def numpy_loss():
        return float(np.sum(_numpy_qrnn(weights, x, mask=MASK, go_backwards=True)[0] * probe))

    expected = finite_difference_grads(numpy_loss, [x, *weights])
    _, got = gradients(
        lambda x: ops.sum(layer(x, mask=MASK, training=True) * ops.convert_to_tensor(probe,
                                                                                    dtype)),
        [x.astype(dtype)], layer.trainable_weights)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, atol=atol)


def test_bidirectional_and_keras_file_match_numpy(rng, tmp_path):
    layer, weights = _layer(rng, return_sequences=True)
    x = rng.normal(size=(B, T, IN)).astype("float32")
    inputs = keras.Input((None, IN))
    both = keras.layers.Bidirectional(layer)
    model = keras.Model(inputs, both(inputs))
    both.set_weights(weights + weights)
    forward, _ = _numpy_qrnn(weights, x)
    backward, _ = _numpy_qrnn(weights, x, go_backwards=True)
    expected = np.concatenate([forward, backward[:, ::-1]], axis=-1)
    np.testing.assert_allclose(np.asarray(model(x)), expected, atol=1e-5)
    keras.saving.register_keras_serializable(package="qrnn_from_docs")(QRNNCell)
    model.save(tmp_path / "qrnn.keras")
    reloaded = keras.saving.load_model(tmp_path / "qrnn.keras", safe_mode=True)
    np.testing.assert_allclose(np.asarray(reloaded(x)), expected, atol=1e-5)


@pytest.mark.tensorflow_only
def test_streams_chunk_by_chunk_like_the_whole_sequence(rng):
    from keras_seq.export import initial_streaming_states, streaming_model

    inputs = keras.Input((None, IN))
    layer = layers.RNN(QRNNCell(U), return_sequences=True, name="qrnn")
    model = keras.Model(inputs, layer(inputs))
    weights = [rng.normal(0.0, 0.5, w.shape).astype("float32") for w in layer.get_weights()]
    layer.set_weights(weights)
    x = rng.normal(size=(1, T, IN)).astype("float32")
    stream = streaming_model(model)
    states = initial_streaming_states(stream, 1)
    chunks = []
    for chunk in (x[:, :2], x[:, 2:3], x[:, 3:]):
        output, *states = stream([chunk, *states])
        chunks.append(np.asarray(output))
        states = [np.asarray(state) for state in states]
    np.testing.assert_allclose(np.concatenate(chunks, 1), _numpy_qrnn(weights, x)[0], atol=1e-5)
