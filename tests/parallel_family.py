"""Shared checks of the parallel recurrences and the xLSTM cells (`MinGRU`, `MinLSTM`,
`RGLRU`, `SLSTM`, `MLSTM`).

Each cell's test file (``tests/layers/test_min_gru.py``, ...) writes its
equations in NumPy (float64) as ``step(x_t, states, weights) -> (output,
new_states)`` (``weights`` in `get_weights()` order) and runs these checks
with it: `numpy_run` drives such a step with Keras'
semantics (a masked step carries the states and repeats the last output;
``go_backwards`` runs from the last step and returns the outputs in that
order). ``tests/`` is put on ``sys.path`` by ``conftest.py``.
"""

from __future__ import annotations

import dataclasses

import keras
import numpy as np
from finite_differences import finite_difference_grads
from keras import ops

BACKEND = keras.backend.backend()
B, T = 3, 6
# Step 3 of row 1 is masked in the middle of the sequence, row 2 is padded.
MASK = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 1, 1], [1, 1, 1, 1, 0, 0]], bool)
# Chunks of a stream: lengths 1, 2 and 3.
CHUNKS = ((0, 1), (1, 3), (3, T))


def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def softplus(v):
    return np.logaddexp(0.0, v)


def numpy_run(step, weights, x, states, mask=None, go_backwards=False):
    """``(outputs (B, T, u), final_states)`` of ``step`` over ``x`` with Keras' semantics."""
    order = range(x.shape[1] - 1, -1, -1) if go_backwards else range(x.shape[1])
    states, output, outputs = [np.asarray(s, "float64") for s in states], None, []
    for t in order:
        new_output, new_states = step(x[:, t], states, weights)
        keep = np.ones((x.shape[0], 1), bool) if mask is None else mask[:, t, None]
        states = [np.where(keep, n, s) for n, s in zip(new_states, states)]
        output = np.where(keep, new_output, 0.0 if output is None else output)
        outputs.append(output)
    return np.stack(outputs, axis=1), states


def random_weights(layer, rng, scale=0.5):
    return [rng.normal(0.0, scale, w.shape) for w in layer.get_weights()]


def trains_in_parallel(layer):
    """The layer's cell trains in its parallel form, on every backend and
    device (JAX's CPU trains `MinGRU` and `MinLSTM` in their fused step loop
    otherwise: `LoopHints.steps_fuse_on_cpu`), so that ``training=True``
    tests that form."""
    hints = layer.cell.loop_hints
    layer.cell.loop_hints = dataclasses.replace(hints, steps_fuse_on_cpu=False)
    return layer


def built(make, features, weights=None, rng=None, dtype="float32", **kwargs):
    """``make(return_sequences=True, return_state=True, **kwargs)`` built for
    ``features`` inputs, with ``weights`` (or random ones from ``rng``),
    training in its parallel form (`trains_in_parallel`)."""
    layer = trains_in_parallel(make(return_sequences=True, return_state=True, dtype=dtype,
                                    **kwargs))
    layer.build((None, None, features))
    if weights is None:
        weights = random_weights(layer, rng)
    layer.set_weights([np.asarray(w, dtype) for w in weights])
    return layer, weights


def _numpy(t):
    return np.asarray(ops.convert_to_numpy(t), "float64")


def assert_layer_computes_the_equations(make, step, x, states, weights, mask=None,
                                        go_backwards=False, atol=1e-5):
    """Both forms (inference: ``step``; training: ``parallel`` or the loop)
    against the NumPy run: every output and final state."""
    layer, _ = built(make, x.shape[-1], weights, go_backwards=go_backwards)
    want_outputs, want_states = numpy_run(step, [np.asarray(w, "float64") for w in weights],
                                          x.astype("float64"), states, mask, go_backwards)
    for training in (False, True):
        got = layer(x, mask=mask, initial_state=[s.astype("float32") for s in states],
                    training=training)
        np.testing.assert_allclose(_numpy(got[0]), want_outputs, atol=atol,
                                   err_msg=f"outputs, training={training}")
        for i, (g, w) in enumerate(zip(got[1:], want_states)):
            np.testing.assert_allclose(_numpy(g), w, atol=atol,
                                       err_msg=f"state {i}, training={training}")




def assert_training_gradients_match_finite_differences(make, step, x, states, weights,
                                                       gradients, mask=MASK, rng=None):
    """The gradient of the training form (``training=True``) of a loss of all
    outputs and final states, for x, the initial states and every weight,
    against float64 central differences of the NumPy run. (Keras' JAX ops
    compute float64 in float32: float32 there, with a looser tolerance.)"""
    dtype, atol = ("float32", 2e-4) if BACKEND == "jax" else ("float64", 1e-6)
    layer, _ = built(make, x.shape[-1], weights, dtype=dtype)
    x64 = x.astype("float64")
    states64 = [np.array(s, "float64") for s in states]
    weights64 = [np.array(w, "float64") for w in weights]
    rng = rng or np.random.default_rng(7)
    outputs, final = numpy_run(step, weights64, x64, states64, mask)
    probes = [rng.normal(size=outputs.shape), *(rng.normal(size=s.shape) for s in final)]

    def numpy_loss():
        sequence, final = numpy_run(step, weights64, x64, states64, mask)
        return sum(np.sum(p * v) for p, v in zip(probes, [sequence, *final]))

    expected = finite_difference_grads(numpy_loss, [x64, *states64, *weights64])

    def loss(x, *initial):
        got = layer(x, mask=mask, initial_state=list(initial), training=True)
        return sum(ops.sum(ops.convert_to_tensor(p, dtype) * v) for p, v in zip(probes, got))

    value, grads = gradients(loss, [x.astype(dtype), *(s.astype(dtype) for s in states)],
                             layer.trainable_weights)
    np.testing.assert_allclose(float(value), numpy_loss(), rtol=1e-5)
    names = ["x", *(f"state {i}" for i in range(len(states))),
             *(w.path for w in layer.trainable_weights)]
    for name, g, e in zip(names, grads, expected):
        np.testing.assert_allclose(np.asarray(g, "float64"), e, atol=atol, err_msg=name)


def assert_parallel_equals_step(make, x, rng, mask=None, atol=2e-5):
    """The training form against the step form on the same weights (float32)."""
    layer, _ = built(make, x.shape[-1], rng=rng)
    step = layer(x, mask=mask, training=False)
    parallel = layer(x, mask=mask, training=True)
    for s, p in zip(step, parallel):
        np.testing.assert_allclose(_numpy(p), _numpy(s), atol=atol, rtol=1e-5)


def assert_bidirectional_forms_agree(make, x, rng, mask=MASK):
    """`keras.layers.Bidirectional` of the layer, masked: training form = step form."""
    layer = keras.layers.Bidirectional(make(return_sequences=True))
    trains_in_parallel(layer.forward_layer)
    trains_in_parallel(layer.backward_layer)
    layer.build((None, None, x.shape[-1]))
    layer.set_weights(random_weights(layer, rng))
    step = _numpy(layer(x, mask=mask, training=False))
    np.testing.assert_allclose(_numpy(layer(x, mask=mask, training=True)), step, atol=2e-5)
    return step


def assert_streams_like_the_whole_sequence(make, features, tmp_path, rng):
    """TensorFlow: the `streaming_model` fed in CHUNKS, in Keras, in LiteRT
    (builtin ops only) and in onnxruntime, equals the whole sequence."""
    import onnxruntime

    from keras_seq.export import (
        convert_to_onnx,
        convert_to_tflite,
        initial_streaming_states,
        run_tflite,
        streaming_model,
        tflite_op_names,
    )

    inputs = keras.Input((None, features), name="sensor")
    model = keras.Model(inputs, make(return_sequences=True, name="rec")(inputs))
    model.layers[-1].set_weights(random_weights(model.layers[-1], rng))
    stream = streaming_model(model)
    x = rng.normal(size=(2, T, features)).astype("float32")
    whole = _numpy(model(x))
    flatbuffer = convert_to_tflite(stream)
    assert not [op for op in tflite_op_names(flatbuffer) if op.startswith("CUSTOM")]
    session = onnxruntime.InferenceSession(convert_to_onnx(stream, tmp_path / "stream.onnx"),
                                           providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    runners = {
        "keras": lambda *a: [_numpy(t) for t in stream(list(a))],
        "litert": lambda *a: run_tflite(flatbuffer, *a),
        "onnxruntime": lambda *a: session.run(None, dict(zip(names, a))),
    }
    for name, run in runners.items():
        states, pieces = initial_streaming_states(stream, 2), []
        for start, end in CHUNKS:
            output, *states = run(x[:, start:end], *states)
            pieces.append(output)
        np.testing.assert_allclose(np.concatenate(pieces, axis=1), whole, atol=1e-5,
                                   err_msg=name)
