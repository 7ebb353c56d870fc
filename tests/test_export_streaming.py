"""`keras_seq.export.streaming_model`: recurrent models fed chunk by chunk, states carried.

The reference is the original model on the whole sequence (its layers are
checked against NumPy and Keras elsewhere); the streamed chunks must give the
same outputs, in Keras and in LiteRT.
"""

import keras
import numpy as np
import pytest

from keras_seq import layers
from keras_seq.export import (
    convert_to_tflite,
    initial_streaming_states,
    run_tflite,
    streaming_model,
    tflite_op_names,
)

B, T, IN = 2, 11, 3
CHUNKS = ((0, 1), (1, 4), (4, 11))  # chunk lengths 1, 3 and 7

KINDS = {
    "peephole": lambda: layers.PeepholeLSTM(5, return_sequences=True, name="rec"),
    "cifg_peepholes": lambda: layers.CoupledGateLSTM(5, use_peepholes=True,
                                                     return_sequences=True, name="rec"),
    "gru": lambda: layers.GRU(5, return_sequences=True, name="rec"),
    "gru_reset_before": lambda: layers.GRU(5, reset_after=False, return_sequences=True,
                                           name="rec"),
    "ntm": lambda: layers.NTM(5, memory_size=6, memory_width=3, return_sequences=True,
                              name="rec"),
    "keras_lstm": lambda: keras.layers.LSTM(5, return_sequences=True, name="rec"),
    "keras_gru": lambda: keras.layers.GRU(5, return_sequences=True, name="rec"),
    "keras_simple_rnn": lambda: keras.layers.SimpleRNN(5, return_sequences=True, name="rec"),
}


def _randomized(model, seed=0):
    rng = np.random.default_rng(seed)
    for w in model.weights:
        w.assign(rng.normal(0.0, 0.5, w.shape).astype(w.dtype))
    return model


def _stream(stream, sequence, backend="keras", flatbuffer=None):
    """The outputs of ``sequence`` fed in CHUNKS, states carried; the last chunk's.

    ``backend="litert"`` runs ``flatbuffer`` positionally; ``"signature"``
    through its SignatureDef, inputs by the streaming model's names and
    outputs by ``output_i``.
    """
    states = initial_streaming_states(stream, len(sequence))
    names = [t.name for t in stream.inputs]
    runner = None
    if backend == "signature":
        from ai_edge_litert.interpreter import Interpreter

        runner = Interpreter(model_content=flatbuffer).get_signature_runner("serving_default")
    pieces = []
    for start, end in CHUNKS:
        if backend == "keras":
            out = [np.asarray(t) for t in stream([sequence[:, start:end], *states])]
        elif backend == "litert":
            out = run_tflite(flatbuffer, sequence[:, start:end], *states)
        else:
            named = runner(**dict(zip(names, [sequence[:, start:end], *states])))
            out = [named[f"output_{i}"] for i in range(len(named))]
        pieces.append(out[0])
        states = out[1:]
    return pieces


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_recurrent_kind_streamed_in_chunks_equals_the_whole_sequence(kind):
    x = keras.Input((None, IN))
    h = KINDS[kind]()(keras.layers.Dense(4)(x))
    model = _randomized(keras.Model(x, keras.layers.Dense(2)(h)))
    stream = streaming_model(model)
    sequence = np.random.default_rng(1).normal(size=(B, T, IN)).astype("float32")
    np.testing.assert_allclose(np.concatenate(_stream(stream, sequence), axis=1),
                               np.asarray(model(sequence)), atol=1e-5)
    state_names = [t.name for t in stream.inputs[1:]]
    assert state_names == [f"rec_state_{i}" for i in range(len(state_names))]
    assert len(stream.outputs) == 1 + len(state_names)


@pytest.fixture(scope="module")
def stacked():
    """Every recurrent kind stacked, the last returning its last step only."""
    x = keras.Input((None, IN))
    h = keras.layers.Dense(6)(x)
    h = layers.PeepholeLSTM(5, return_sequences=True, name="peephole")(h)
    h = keras.layers.LSTM(4, return_sequences=True, name="keras_lstm")(h)
    h = keras.layers.GRU(4, return_sequences=True, name="keras_gru")(h)
    h = keras.layers.SimpleRNN(3, return_sequences=True, name="simple")(h)
    h = layers.NTM(4, memory_size=5, memory_width=3, return_sequences=True, name="ntm")(h)
    h = layers.Highway()(h)
    h = layers.CoupledGateLSTM(4, name="cifg")(h)
    model = _randomized(keras.Model(x, keras.layers.Dense(2)(h)))
    sequence = np.random.default_rng(2).normal(size=(B, T, IN)).astype("float32")
    return model, streaming_model(model), sequence


def test_stack_streams_to_the_last_step_output_and_uses_convertible_keras_layers(stacked):
    model, stream, sequence = stacked
    last = _stream(stream, sequence)[-1]
    np.testing.assert_allclose(last, np.asarray(model(sequence)), atol=1e-5)
    kinds = {layer.name: type(layer) for layer in stream.layers}
    assert kinds["keras_lstm"] is layers.ConvertibleLSTM
    assert kinds["simple"] is layers.ConvertibleSimpleRNN
    assert kinds["keras_gru"] is layers.GRU


def test_the_returned_states_feed_the_next_call_as_they_are(stacked):
    """The loop as a user writes it: ``outputs, *states = stream([chunk, *states])``,
    the states tensors from the second chunk on, NumPy first, and any mix."""
    model, stream, sequence = stacked
    states = initial_streaming_states(stream, B)
    for start, end in CHUNKS:
        outputs, *states = stream([sequence[:, start:end], *states])
    np.testing.assert_allclose(np.asarray(outputs), np.asarray(model(sequence)), atol=1e-5)
    mixed = initial_streaming_states(stream, B)
    for i, (start, end) in enumerate(CHUNKS):
        chunk = sequence[:, start:end]
        if i == 1:  # a tensor chunk, and every other state back to NumPy
            chunk = keras.ops.convert_to_tensor(chunk)
            mixed = [np.asarray(s) if j % 2 else s for j, s in enumerate(mixed)]
        outputs, *mixed = stream([chunk, *mixed])
    np.testing.assert_allclose(np.asarray(outputs), np.asarray(model(sequence)), atol=1e-5)


def test_initial_states_are_zeros_and_the_ntms_start(stacked):
    _, stream, _ = stacked
    states = dict(zip([t.name for t in stream.inputs[1:]], initial_streaming_states(stream, 3)))
    assert not np.any(states["peephole_state_0"]) and states["peephole_state_0"].shape == (3, 5)
    ntm = stream.get_layer("ntm")
    start = ntm.cell.get_initial_state(batch_size=3)
    for i, expected in enumerate(start):
        np.testing.assert_array_equal(states[f"ntm_state_{i}"], np.asarray(expected))
    assert np.any(states["ntm_state_2"])  # not all zeros: the read vector and weightings


@pytest.mark.slow
def test_stack_converts_to_builtin_tflite_that_streams_like_keras_in_litert(stacked):
    model, stream, sequence = stacked
    flatbuffer = convert_to_tflite(stream)
    assert not [op for op in tflite_op_names(flatbuffer) if op.startswith("CUSTOM")]
    last = _stream(stream, sequence, backend="litert", flatbuffer=flatbuffer)[-1]
    np.testing.assert_allclose(last, np.asarray(model(sequence)), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
def test_each_recurrent_kind_streams_in_litert_through_its_named_signature(kind):
    x = keras.Input((None, IN), name="sensor")
    h = KINDS[kind]()(keras.layers.Dense(4)(x))
    model = _randomized(keras.Model(x, keras.layers.Dense(2)(h)))
    stream = streaming_model(model)
    flatbuffer = convert_to_tflite(stream)
    assert not [op for op in tflite_op_names(flatbuffer) if op.startswith("CUSTOM")]
    from ai_edge_litert.interpreter import Interpreter

    signature = Interpreter(model_content=flatbuffer).get_signature_list()["serving_default"]
    names = [t.name for t in stream.inputs]
    assert sorted(signature["inputs"]) == sorted(names) and names[0] == "sensor"
    assert sorted(signature["outputs"]) == [f"output_{i}" for i in range(len(names))]
    sequence = np.random.default_rng(1).normal(size=(B, T, IN)).astype("float32")
    whole = np.asarray(model(sequence))
    for backend in ("signature", "litert"):  # by name, and positionally in call order
        pieces = _stream(stream, sequence, backend, flatbuffer)
        np.testing.assert_allclose(np.concatenate(pieces, axis=1), whole, atol=1e-5)


def _tensor_types(flatbuffer) -> set[str]:
    from ai_edge_litert import schema_py_generated as schema

    names = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    m = schema.Model.GetRootAsModel(flatbuffer, 0)
    return {
        names[m.Subgraphs(s).Tensors(t).Type()]
        for s in range(m.SubgraphsLength())
        for t in range(m.Subgraphs(s).TensorsLength())
    }


@pytest.fixture(scope="module")
def wide():
    """Layers wide enough for the converter to quantize their weights (it
    leaves weights of fewer than 1024 values in float32)."""
    x = keras.Input((None, IN), name="sensor")
    h = layers.PeepholeLSTM(48, return_sequences=True, name="lstm")(keras.layers.Dense(32)(x))
    h = layers.GRU(48, return_sequences=True, name="gru")(h)
    model = keras.Model(x, keras.layers.Dense(2)(h))
    rng = np.random.default_rng(4)
    for w in model.weights:
        w.assign(rng.normal(0.0, 0.15, w.shape).astype(w.dtype))
    stream = streaming_model(model)
    return model, stream, convert_to_tflite(stream)


@pytest.mark.slow
@pytest.mark.parametrize("quantize, stored, atol", [("float16", "FLOAT16", 5e-3),
                                                    ("dynamic", "INT8", 5e-2)])
def test_quantized_streaming_models_stream_close_to_keras(wide, quantize, stored, atol):
    model, stream, float_flatbuffer = wide
    flatbuffer = convert_to_tflite(stream, quantize=quantize)
    assert not [op for op in tflite_op_names(flatbuffer) if op.startswith("CUSTOM")]
    assert stored in _tensor_types(flatbuffer) and stored not in _tensor_types(float_flatbuffer)
    assert len(flatbuffer) < len(float_flatbuffer)  # the weights are stored smaller
    sequence = np.random.default_rng(5).normal(size=(B, T, IN)).astype("float32")
    whole = np.asarray(model(sequence))
    pieces = _stream(stream, sequence, "signature", flatbuffer)
    streamed = np.concatenate(pieces, axis=1)
    np.testing.assert_allclose(streamed, whole, atol=atol)
    assert np.abs(streamed - whole).max() > 1e-7  # quantized: not the float32 numbers


def test_an_explicit_input_signature_feeds_the_inputs_in_order_and_keeps_their_names():
    import tensorflow as tf

    x = keras.Input((None, IN), name="sensor")
    model = _randomized(keras.Model(x, layers.GRU(4, return_sequences=True, name="gru")(x)))
    stream = streaming_model(model)
    specs = [tf.TensorSpec([1, None, IN]), tf.TensorSpec([1, 4])]
    flatbuffer = convert_to_tflite(stream, input_signature=specs)
    from ai_edge_litert.interpreter import Interpreter

    signature = Interpreter(model_content=flatbuffer).get_signature_list()["serving_default"]
    assert sorted(signature["inputs"]) == ["gru_state_0", "sensor"]
    sequence = np.random.default_rng(3).normal(size=(1, T, IN)).astype("float32")
    np.testing.assert_allclose(np.concatenate(_stream(stream, sequence, "litert", flatbuffer), 1),
                               np.asarray(model(sequence)), atol=1e-5)
    with pytest.raises(ValueError, match="one spec per input"):
        convert_to_tflite(stream, input_signature=specs[:1])


def _masked_model():
    x = keras.Input((None,), dtype="int32", name="tokens")
    h = keras.layers.Embedding(7, 4, mask_zero=True)(x)
    h = layers.GRU(5, return_sequences=True, name="gru")(h)
    return _randomized(keras.Model(x, layers.PeepholeLSTM(3, name="lstm")(h)))


_PADDED = np.array([[1, 2, 3, 4, 5, 6, 1, 2, 0, 0, 0],
                    [3, 3, 1, 0, 0, 0, 0, 0, 0, 0, 0]], "int32")


def test_padding_at_the_end_of_a_stream_keeps_the_state():
    model = _masked_model()
    stream = streaming_model(model)
    np.testing.assert_allclose(_stream(stream, _PADDED)[-1], np.asarray(model(_PADDED)),
                               atol=1e-5)


@pytest.mark.slow
def test_padding_at_the_end_of_a_stream_keeps_the_state_in_litert():
    model = _masked_model()
    stream = streaming_model(model)
    flatbuffer = convert_to_tflite(stream)
    assert not [op for op in tflite_op_names(flatbuffer) if op.startswith("CUSTOM")]
    # The last chunk (steps 4..10) is all padding for the second row.
    last = _stream(stream, _PADDED, "signature", flatbuffer)[-1]
    np.testing.assert_allclose(last, np.asarray(model(_PADDED)), atol=1e-5)


def test_wrong_state_count_or_width_is_a_value_error_naming_layer_and_shape():
    x = keras.Input((None, IN), name="sensor")
    h = layers.GRU(4, return_sequences=True, name="gru")(x)
    model = keras.Model(x, layers.PeepholeLSTM(5, name="lstm")(h))
    stream = streaming_model(model)
    chunk = np.zeros((2, 3, IN), "float32")
    states = initial_streaming_states(stream, 2)
    with pytest.raises(ValueError, match=r"expected 4 inputs .*sensor, gru_state_0, "
                                         r"lstm_state_0, lstm_state_1.*received 3"):
        stream([chunk, *states[:2]])
    wrong = [states[0], np.zeros((2, 4), "float32"), states[2]]
    with pytest.raises(ValueError, match=r"state 0 of layer 'lstm'.*\(batch, 5\).*\(2, 4\)"):
        stream([chunk, *wrong])
    with pytest.raises(ValueError, match=r"state 0 of layer 'gru'.*\(batch, 4\).*\(2,\)"):
        stream([chunk, np.zeros((2,), "float32"), *states[1:]])


def _bidirectional(x):
    return keras.layers.Bidirectional(layers.GRU(3, return_sequences=True), name="bi")(x)


def _backwards(x):
    return layers.GRU(3, go_backwards=True, return_sequences=True, name="back")(x)


def _attention(x):
    return layers.MultiHeadAttention(num_heads=1, key_dim=3, name="att")(x, x)


def _pooling(x):
    return keras.layers.GlobalAveragePooling1D(name="pool")(x)


@pytest.mark.parametrize("whole, name", [(_bidirectional, "bi"), (_backwards, "back"),
                                         (_attention, "att"), (_pooling, "pool")])
def test_a_layer_that_needs_the_whole_sequence_is_refused_by_name(whole, name):
    x = keras.Input((None, IN))
    h = layers.GRU(3, return_sequences=True)(x)
    model = keras.Model(x, whole(h))
    with pytest.raises(ValueError, match=f"streaming_model: layer '{name}'.*whole"):
        streaming_model(model)


def test_a_model_without_recurrent_layer_or_a_nested_one_is_refused():
    x = keras.Input((None, IN))
    with pytest.raises(ValueError, match="has no recurrent layer"):
        streaming_model(keras.Model(x, keras.layers.Dense(2)(x)))
    inner = keras.Sequential([keras.Input((None, IN)), layers.GRU(3)], name="inner")
    with pytest.raises(ValueError, match="layer 'inner' is a nested model"):
        streaming_model(keras.Model(x, inner(x)))


def test_a_sequential_model_streams():
    model = _randomized(keras.Sequential(
        [keras.Input((None, IN)), layers.CoupledGateLSTM(4, return_sequences=True),
         keras.layers.Dense(2)]))
    stream = streaming_model(model)
    sequence = np.random.default_rng(3).normal(size=(B, T, IN)).astype("float32")
    np.testing.assert_allclose(np.concatenate(_stream(stream, sequence), axis=1),
                               np.asarray(model(sequence)), atol=1e-5)


@pytest.mark.slow
def test_a_tflite_fed_a_state_of_the_wrong_width_fails_in_litert_and_run_tflite_names_it():
    from ai_edge_litert.interpreter import Interpreter

    x = keras.Input((None, IN), name="sensor")
    stream = streaming_model(keras.Model(x, layers.GRU(4, return_sequences=True, name="gru")(x)))
    flatbuffer = convert_to_tflite(stream)
    chunk, wrong = np.zeros((2, 3, IN), "float32"), np.zeros((2, 5), "float32")
    runner = Interpreter(model_content=flatbuffer).get_signature_runner()
    with pytest.raises(RuntimeError, match="failed to prepare"):  # the runtime's own error
        runner(sensor=chunk, gru_state_0=wrong)
    with pytest.raises(ValueError, match=r"input 1 .*gru_state_0.*\(None, 4\).*\(2, 5\)"):
        run_tflite(flatbuffer, chunk, wrong)


# ---------------------------------------------------------------------------
# The example (examples/streaming.py)


@pytest.fixture(scope="module")
def example():
    import importlib.util
    import os
    import sys

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                        "streaming.py")
    spec = importlib.util.spec_from_file_location("streaming_example", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_the_example_labels_each_step_within_memory_of_a_gesture_end(example):
    x, y, starts = example.make_streams(40, 60, np.random.default_rng(0), return_starts=True)
    g, memory = example.GESTURE, example.MEMORY
    for row in range(len(y)):
        for t in range(60):  # 1 iff some gesture ended at most MEMORY steps before t
            ended = any(0 <= t - (s + g - 1) <= memory for s in starts[row])
            assert y[row, t] == int(ended), (row, t)
    # During a gesture channel 0 rises by the ramp against the stream's noise.
    rises = [x[r, s + g - 1, 0] - x[r, s, 0] for r in range(len(y)) for s in starts[r]]
    assert len(rises) > 10 and np.mean(rises) > 0.8
    assert 0.05 < y.mean() < 0.6  # both labels occur


@pytest.mark.slow
def test_the_example_streams_in_litert_and_onnxruntime_as_keras(example, capsys):
    # Its ONNX stream has the PeepholeLSTM's peepholes (input P): the warning says
    # which provider drops them.
    with pytest.warns(UserWarning, match="PeepholeLSTM 'lstm': the OpenVINO execution provider"):
        result = example.main(["--train", "200", "--epochs", "1", "--test", "10", "--length",
                               "30"])
    assert result["parity_chunk_1"] < 1e-5 and result["parity_chunk_10"] < 1e-5
    assert result["onnx_parity_chunk_1"] < 1e-5 and result["onnx_parity_chunk_10"] < 1e-5
    assert result["int8_agreement"] > 0.95
    assert result["int8_kb"] < result["float_kb"]
    printed = capsys.readouterr().out
    assert "parity, LiteRT chunk by chunk" in printed and "(target 99.5%)" in printed
    assert "parity, onnxruntime chunk by chunk" in printed
