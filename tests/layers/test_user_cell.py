"""A user's cell, written with public names only, gets everything a package cell gets.

The cell is the Minimal Gated Unit of docs/guides/write_your_own_cell.md (Zhou et
al. 2016), taken from that page's first code block, so the page cannot
drift from what runs. It is checked against NumPy written from the paper's
equations (masks, ``go_backwards``, initial states, ``Bidirectional``),
inside ``keras.layers.RNN``, through ``.keras`` files and the model builders
on every backend, and on TensorFlow through streaming, TFLite (builtin ops
only) and ONNX.
"""

import keras
import numpy as np
import pytest
from user_cell_from_docs import MGUCell

from keras_seq import layers, models

B, T, IN, U = 3, 6, 4, 5

models.register_cell("test_mgu", MGUCell)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _numpy_mgu(weights, x, h0=None, mask=None, go_backwards=False):
    """The paper's equations, step by step; Keras' masking rule (a masked
    step keeps h and repeats the last output); outputs in processing order."""
    kernel, recurrent_kernel, bias = (w.astype("float64") for w in weights)
    W_f, W_h = np.split(kernel, 2, axis=1)
    U_f, U_h = np.split(recurrent_kernel, 2, axis=1)
    b_f, b_h = np.split(bias, 2)
    h = np.zeros((x.shape[0], U)) if h0 is None else h0.astype("float64")
    output, outputs = np.zeros_like(h), []
    for t in (range(x.shape[1] - 1, -1, -1) if go_backwards else range(x.shape[1])):
        x_t = x[:, t].astype("float64")
        f = _sigmoid(x_t @ W_f + h @ U_f + b_f)
        h_tilde = np.tanh(x_t @ W_h + (f * h) @ U_h + b_h)
        new = (1.0 - f) * h + f * h_tilde
        keep = np.ones((x.shape[0], 1), bool) if mask is None else mask[:, t, None]
        h, output = np.where(keep, new, h), np.where(keep, new, output)
        outputs.append(output)
    return np.stack(outputs, 1), h


def _layer(rng, **kwargs):
    layer = layers.RNN(MGUCell(U), **kwargs)
    layer.build((None, None, IN))
    weights = [rng.normal(0.0, 0.5, w.shape).astype("float32") for w in layer.get_weights()]
    layer.set_weights(weights)
    return layer, weights


@pytest.mark.parametrize("go_backwards", [False, True])
def test_user_cell_matches_numpy_with_mask_and_initial_state(go_backwards, rng):
    layer, weights = _layer(rng, return_sequences=True, return_state=True,
                            go_backwards=go_backwards)
    x = rng.normal(size=(B, T, IN)).astype("float32")
    h0 = rng.normal(size=(B, U)).astype("float32")
    mask = np.arange(T)[None, :] < np.array([[6], [3], [1]])
    sequence, h = layer(x, mask=mask, initial_state=[h0])
    expected, expected_h = _numpy_mgu(weights, x, h0, mask, go_backwards)
    np.testing.assert_allclose(np.asarray(sequence), expected, atol=1e-5)
    np.testing.assert_allclose(np.asarray(h), expected_h, atol=1e-5)


def test_user_cell_in_keras_rnn_and_bidirectional_match_numpy(rng):
    layer, weights = _layer(rng, return_sequences=True)
    x = rng.normal(size=(B, T, IN)).astype("float32")
    forward, _ = _numpy_mgu(weights, x)
    # Keras' own RNN runs the cell's `call` (project then step) step by step.
    keras_rnn = keras.layers.RNN(MGUCell(U), return_sequences=True)
    keras_rnn.build((None, None, IN))
    keras_rnn.set_weights(weights)
    np.testing.assert_allclose(np.asarray(keras_rnn(x)), forward, atol=1e-5)
    both = keras.layers.Bidirectional(layer)
    both.build((None, None, IN))
    both.set_weights(weights + weights)
    backward, _ = _numpy_mgu(weights, x, go_backwards=True)
    expected = np.concatenate([forward, backward[:, ::-1]], axis=-1)
    np.testing.assert_allclose(np.asarray(both(x)), expected, atol=1e-5)


def test_user_cell_model_round_trips_through_keras_file_and_builders(tmp_path, rng):
    ids = rng.integers(1, 9, size=(4, 7))
    ids[0, 5:] = 0
    keras.utils.set_random_seed(0)
    model = models.language_model(9, kind="rnn", num_layers=1, units=6, cell="test_mgu")
    assert any(isinstance(layer, layers.RNN) and isinstance(layer.cell, MGUCell)
               for layer in model.layers)
    model.compile(optimizer=keras.optimizers.Adam(0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    losses = model.fit(ids[:, :-1], ids[:, 1:], epochs=4, verbose=0).history["loss"]
    assert losses[-1] < losses[0]
    path = tmp_path / "mgu.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(np.asarray(reloaded.predict(ids, verbose=0)),
                               np.asarray(model.predict(ids, verbose=0)), atol=1e-6)


@pytest.mark.tensorflow_only
@pytest.mark.slow
def test_user_cell_streams_and_exports_with_builtin_ops(rng, tmp_path):
    import onnxruntime as ort
    from ai_edge_litert.interpreter import Interpreter

    from keras_seq.export import (
        convert_to_onnx,
        convert_to_tflite,
        initial_streaming_states,
        streaming_model,
    )
    from keras_seq.export.tflite_export import tflite_op_names

    inputs = keras.Input((None, IN))
    layer = layers.RNN(MGUCell(U), return_sequences=True, name="mgu")
    model = keras.Model(inputs, layer(inputs))
    weights = [rng.normal(0.0, 0.5, w.shape).astype("float32") for w in layer.get_weights()]
    layer.set_weights(weights)
    x = rng.normal(size=(1, T, IN)).astype("float32")
    expected, _ = _numpy_mgu(weights, x)

    stream = streaming_model(model)
    states = initial_streaming_states(stream, 1)
    chunks = []
    for chunk in (x[:, :2], x[:, 2:3], x[:, 3:]):
        output, *states = stream([chunk, *states])
        chunks.append(np.asarray(output))
        states = [np.asarray(state) for state in states]
    np.testing.assert_allclose(np.concatenate(chunks, 1), expected, atol=1e-5)

    flatbuffer = convert_to_tflite(stream)
    assert not any(name.startswith("FlexDelegate") or name == "CUSTOM"
                   for name in tflite_op_names(flatbuffer))
    interpreter = Interpreter(model_content=flatbuffer)
    runner = interpreter.get_signature_runner()
    states = {"mgu_state_0": np.zeros((1, U), "float32")}
    result = runner(**{stream.inputs[0].name: x}, **states)
    np.testing.assert_allclose(result["output_0"], expected, atol=1e-5)

    path = convert_to_onnx(model, tmp_path / "mgu.onnx")
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_cell_without_step_is_a_type_error():
    class NoStep(layers.RecurrentCell):
        state_size = 2

    with pytest.raises(TypeError, match="NoStep must define `step"):
        NoStep()


def test_register_cell_checks_its_arguments():
    with pytest.raises(TypeError, match="is a layer; pass the cell class"):
        models.register_cell("bad", layers.GRU)
    with pytest.raises(TypeError, match="register_cell"):
        models.register_cell("bad", "not a class")


def test_input_dropout_in_keras_rnn_is_one_mask_per_sequence_and_call():
    """`RecurrentCell` takes its dropout masks from Keras' private
    `DropoutRNNCell` base (docs/keras_internals.md): inside Keras' own
    `keras.layers.RNN` a cell's input dropout mask must be one per sequence
    (every step the same) and drawn afresh at every call, as for Keras'
    `LSTMCell`. A Keras release that changes this fails here."""

    class DroppedIdentity(layers.RecurrentCell):
        def __init__(self, units, **kwargs):
            super().__init__(**kwargs)
            self.state_size, self.dropout = units, 0.5
            self.seed_generator = keras.random.SeedGenerator(1)

        def step(self, inputs, states, training=False):
            return inputs, [inputs]

    rnn = keras.layers.RNN(DroppedIdentity(64), return_sequences=True)
    x = np.ones((2, 5, 64), "float32")
    first, second = (np.asarray(rnn(x, training=True)) for _ in range(2))
    for out in (first, second):
        assert set(np.unique(out)) == {0.0, 2.0}  # kept inputs scaled by 1 / (1 - 0.5)
        np.testing.assert_array_equal(out, np.repeat(out[:, :1], 5, axis=1))
    assert not np.array_equal(first, second)
