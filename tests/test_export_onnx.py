"""ONNX export through tf2onnx, checked with onnxruntime against Keras and NumPy."""

import os

import keras
import numpy as np
import onnx
import onnxruntime
import pytest
import tensorflow as tf

from keras_seq import decoding, layers, models
from keras_seq.export import convert_decoder_steps_to_onnx, convert_seq2seq_to_onnx, convert_to_onnx
from keras_seq.text import END_ID, PAD_ID, START_ID

pytestmark = pytest.mark.slow


def _run_onnx(path, feeds):
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _reference_peephole_lstm(x, mask, weights, units):
    """`PeepholeLSTMCell`'s equations in NumPy; masked steps carry h, c."""
    kernel, recurrent_kernel, bias, p_i, p_f, p_o = weights
    batch = x.shape[0]
    h = np.zeros((batch, units), np.float32)
    c = np.zeros((batch, units), np.float32)
    outputs = []
    for t in range(x.shape[1]):
        z = x[:, t] @ kernel + h @ recurrent_kernel + bias
        z_i, z_f, z_c, z_o = np.split(z, 4, axis=-1)
        i = _sigmoid(z_i + p_i * c)
        f = _sigmoid(z_f + p_f * c)
        c_t = f * c + i * np.tanh(z_c)
        o = _sigmoid(z_o + p_o * c_t)
        h_t = o * np.tanh(c_t)
        keep = mask[:, t, None]
        h, c = np.where(keep, h_t, h), np.where(keep, c_t, c)
        outputs.append(h)
    return np.stack(outputs, 1)


def test_masked_gru_matches_keras_gru_with_copied_weights(tmp_path, rng):
    inputs = keras.Input((None, 3), name="x")
    masked = keras.layers.Masking()(inputs)
    model = keras.Model(inputs, layers.GRU(5, return_sequences=True)(masked))
    reference = keras.Sequential(
        [keras.Input((None, 3)), keras.layers.Masking(),
         keras.layers.GRU(5, return_sequences=True)]
    )
    reference.set_weights(model.get_weights())
    path = convert_to_onnx(model, tmp_path / "gru.onnx")
    # Loops and dynamic axes: one file serves every batch size and length.
    for batch, length in ((4, 6), (1, 9)):
        x = rng.normal(size=(batch, length, 3)).astype("float32")
        x[0, length // 2 :] = 0.0  # padded tail, skipped by the mask
        (got,) = _run_onnx(path, {"x": x})
        np.testing.assert_allclose(got, reference(x), atol=1e-4)


def test_masked_peephole_lstm_matches_numpy_equations(tmp_path, rng):
    inputs = keras.Input((None, 4), name="x")
    lstm = layers.PeepholeLSTM(3, return_sequences=True)
    model = keras.Model(inputs, lstm(keras.layers.Masking()(inputs)))
    # Non-zero peepholes, so that they are tested too.
    lstm.set_weights([rng.normal(scale=0.5, size=w.shape).astype("float32")
                      for w in lstm.get_weights()])
    # One native LSTM node with its peepholes (input P), which the OpenVINO
    # provider would drop: the converter says so.
    with pytest.warns(UserWarning, match="PeepholeLSTM .*OpenVINO"):
        path = convert_to_onnx(model, tmp_path / "peephole.onnx", opset=15)
    assert onnx.load(path).opset_import[0].version == 15
    assert [n.op_type for n in onnx.load(path).graph.node if n.op_type in ("LSTM", "Loop")] == [
        "LSTM"]
    x = rng.normal(size=(3, 7, 4)).astype("float32")
    x[1, 4:] = 0.0
    (got,) = _run_onnx(path, {"x": x})
    mask = np.any(x != 0.0, axis=-1)
    expected = _reference_peephole_lstm(x, mask, lstm.get_weights(), 3)
    np.testing.assert_allclose(got, expected, atol=1e-4)
    np.testing.assert_allclose(got, model(x), atol=1e-4)


def test_transformer_encoder_with_padding_mask_matches_keras(tmp_path, rng):
    x_in = keras.Input((None, 8), name="x")
    mask_in = keras.Input((None,), dtype="bool", name="padding_mask")
    encoder = layers.TransformerEncoder(16, num_heads=2)
    model = keras.Model([x_in, mask_in], encoder(x_in, padding_mask=mask_in))
    path = convert_to_onnx(model, tmp_path / "encoder.onnx")
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    mask = np.arange(5)[None, :] < np.array([[5], [3]])
    (got,) = _run_onnx(path, {"x": x, "padding_mask": mask})
    np.testing.assert_allclose(got, model([x, mask]), atol=1e-4)


def test_convert_to_onnx_rejects_bad_opset(tmp_path):
    inputs = keras.Input((None, 3))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    with pytest.raises(ValueError, match="convert_to_onnx: invalid value for argument `opset`: expected a positive integer"):
        convert_to_onnx(model, tmp_path / "x.onnx", opset=0)


def test_transformer_seq2seq_forward_matches_keras(tmp_path, rng):
    keras.utils.set_random_seed(5)
    model = models.transformer_seq2seq(
        20, 15, num_layers=1, model_dim=8, num_heads=2, intermediate_dim=16, dropout=0.0
    )
    path = convert_seq2seq_to_onnx(model, tmp_path / "t.onnx")
    x = rng.integers(4, 20, (3, 6)).astype("int32")
    x[1, 2:] = 0
    y = rng.integers(4, 15, (3, 4)).astype("int32")
    y[2, 1:] = 0
    (got,) = _run_onnx(path, {"encoder_inputs": x, "decoder_inputs": y})
    np.testing.assert_allclose(
        got, model({"encoder_inputs": x, "decoder_inputs": y}), atol=1e-4
    )


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_encoder_and_step_greedy_loop_equals_greedy_decode(tmp_path, rng, family):
    keras.utils.set_random_seed(6)
    if family == "rnn":
        model = models.rnn_seq2seq(20, 15, units=8, embedding_dim=4)
    else:
        # Cached decoding: the key/value cache update must be plain ONNX ops.
        model = models.transformer_seq2seq(
            20, 15, num_layers=1, model_dim=8, num_heads=2, intermediate_dim=16,
            dropout=0.0, normalize_first=True,
        )
    model.set_weights(
        [rng.normal(scale=0.5, size=w.shape).astype(w.dtype) for w in model.get_weights()]
    )
    encoder_path, step_path = convert_decoder_steps_to_onnx(
        model, tmp_path / "encoder.onnx", tmp_path / "step.onnx", target_length=8
    )
    x = rng.integers(4, 20, (4, 7)).astype("int32")
    x[1, 3:] = 0
    x[2, 1:] = 0
    outputs = _run_onnx(encoder_path, {"encoder_inputs": x})
    step = onnxruntime.InferenceSession(step_path, providers=["CPUExecutionProvider"])
    names = [i.name for i in step.get_inputs()]
    num_state = len(step.get_outputs()) - 1
    constants, state = outputs[: len(outputs) - num_state], outputs[len(outputs) - num_state :]
    # The host loop of an app, written out: argmax, PAD after END.
    ids = np.zeros((4, 8), np.int32)
    tokens = np.full(4, START_ID, np.int32)
    finished = np.zeros(4, bool)
    for t in range(8):
        feeds = dict(zip(names, [tokens, np.array(t, np.int32), *constants, *state]))
        logits, *state = step.run(None, feeds)
        tokens = np.where(finished, PAD_ID, logits.argmax(-1)).astype(np.int32)
        ids[:, t] = tokens
        finished |= tokens == END_ID
    np.testing.assert_array_equal(ids, decoding.greedy_decode(model, x, 8))
    assert len({tuple(row) for row in ids}) > 1


def test_convert_to_onnx_refuses_ops_onnx_lacks(tmp_path):
    # keras.ops.slice_update lowers to XlaDynamicUpdateSlice, which tf2onnx
    # leaves unconverted; the file would not load in any runtime.
    def update(x):
        return keras.ops.slice_update(x, (0, 1), tf.ones((2, 1)))

    signature = [tf.TensorSpec([2, 3], tf.float32, name="x")]
    with pytest.raises(ValueError, match=r"cannot convert the TensorFlow op\(s\) \['XlaDynamicUpdateSlice'\]"):
        convert_to_onnx(update, tmp_path / "x.onnx", signature)
    assert not (tmp_path / "x.onnx").exists()


def test_optimisers_run_in_place_and_one_that_fails_there_falls_back_to_tf2onnx_default(
    tmp_path, rng, monkeypatch
):
    """tf2onnx's optimisers run without its per-optimiser graph copies
    (``TF2ONNX_CATCH_ERRORS=FALSE``) unless that raises; then the conversion
    runs again with tf2onnx's default, and the file still matches Keras."""
    from tf2onnx import optimizer

    monkeypatch.delenv("TF2ONNX_CATCH_ERRORS", raising=False)
    optimize_graph = optimizer.optimize_graph
    seen = []

    def failing_in_place(graph, catch_errors=True, optimizers=None):
        seen.append(catch_errors)
        if not catch_errors:
            raise RuntimeError("an optimiser failed in place")
        return optimize_graph(graph, catch_errors, optimizers)

    monkeypatch.setattr(optimizer, "optimize_graph", failing_in_place)
    inputs = keras.Input((None, 3), name="x")
    model = keras.Model(inputs, layers.GRU(4)(inputs))
    path = convert_to_onnx(model, tmp_path / "gru.onnx")
    assert seen == [False, True]
    assert "TF2ONNX_CATCH_ERRORS" not in os.environ  # restored
    x = rng.normal(size=(2, 5, 3)).astype("float32")
    (got,) = _run_onnx(path, {"x": x})
    np.testing.assert_allclose(got, model(x), atol=1e-5)


def test_tf2onnx_notes_stay_quiet_and_a_node_it_fails_is_one_error_line(
    tmp_path, monkeypatch, capfd
):
    """tf2onnx logs its notes ("missing output shape ...") and, for a node it
    cannot convert, an error with a traceback, then writes a graph no
    runtime loads (an RG-LRU stream did, before its concat axis was made
    positive). Its notes never reach stderr; such an error fails the
    conversion in one line naming the node, and no file is written."""
    import logging

    from tf2onnx import optimizer

    optimize_graph = optimizer.optimize_graph

    def logging_like_tf2onnx(graph, *args, **kwargs):
        logging.getLogger("tf2onnx.graph").warning("missing output shape for while/Identity_5:0")
        return optimize_graph(graph, *args, **kwargs)

    monkeypatch.setattr(optimizer, "optimize_graph", logging_like_tf2onnx)
    inputs = keras.Input((None, 3), name="x")
    model = keras.Model(inputs, layers.GRU(4)(inputs))
    convert_to_onnx(model, tmp_path / "gru.onnx")
    assert capfd.readouterr().err == ""

    def failing_a_node(graph, *args, **kwargs):
        logging.getLogger("tf2onnx.tfonnx").error(
            "Failed to convert node 'while/block/concat_4' (fct=ConcatV2)\nTraceback ...")
        return optimize_graph(graph, *args, **kwargs)

    monkeypatch.setattr(optimizer, "optimize_graph", failing_a_node)
    with pytest.raises(ValueError) as caught:
        convert_to_onnx(model, tmp_path / "bad.onnx")
    message = str(caught.value)
    assert "\n" not in message and "'while/block/concat_4'" in message, message
    assert not (tmp_path / "bad.onnx").exists()
    assert capfd.readouterr().err == ""


def test_a_sequential_model_never_called_converts_and_matches_keras(tmp_path, rng):
    # Keras' `model.input` of such a model raises ("has never been called").
    model = keras.Sequential([keras.Input((None, 3), name="x"), layers.GRU(4)])
    path = convert_to_onnx(model, tmp_path / "gru.onnx")
    x = rng.normal(size=(2, 5, 3)).astype("float32")
    (got,) = _run_onnx(path, {"x": x})
    np.testing.assert_allclose(got, model(x), atol=1e-5)
