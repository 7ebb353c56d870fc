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
    """The outputs of ``sequence`` fed in CHUNKS, states carried; the last chunk's."""
    states = initial_streaming_states(stream, len(sequence))
    pieces = []
    for start, end in CHUNKS:
        if backend == "keras":
            out = [np.asarray(t) for t in stream([sequence[:, start:end], *states])]
        else:
            out = run_tflite(flatbuffer, sequence[:, start:end], *states)
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


def test_padding_at_the_end_of_a_stream_keeps_the_state():
    x = keras.Input((None,), dtype="int32")
    h = keras.layers.Embedding(7, 4, mask_zero=True)(x)
    h = layers.GRU(5, return_sequences=True, name="gru")(h)
    model = _randomized(keras.Model(x, layers.PeepholeLSTM(3, name="lstm")(h)))
    tokens = np.array([[1, 2, 3, 4, 5, 6, 1, 2, 0, 0, 0],
                       [3, 3, 1, 0, 0, 0, 0, 0, 0, 0, 0]], "int32")
    stream = streaming_model(model)
    np.testing.assert_allclose(_stream(stream, tokens)[-1], np.asarray(model(tokens)),
                               atol=1e-5)


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
