"""`AttentionWrapper` against NumPy written from TensorFlow Addons' step.

For one target step x_t: (y_t, s_t) = cell([x_t; a_{t-1}], s_{t-1});
α_t = attention(y_t, memory, α_{t-1}); c_t = Σ_j α_tj m_j; a_t = W_c [y_t; c_t]
(or c_t); output a_t (or y_t); a masked target step keeps every state and
repeats the last output (Keras' rule). The cells: a user's (the Minimal Gated
Unit of docs/guides/write_your_own_cell.md, public names only), Keras' LSTM
cell and the package's GRU cell; the scores: Bahdanau's, Luong's and the
monotonic expected alignment (Raffel et al. 2017) as the paper's sum.
"""

import keras
import numpy as np
import pytest
from monotonic_reference import expected_alignment
from user_cell_from_docs import MGUCell

from keras_seq import layers

B, T, IN, U, S, D = 3, 5, 4, 6, 7, 5


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# --- the cells, one step each ---

def _mgu_step(weights, x, states):
    kernel, recurrent_kernel, bias = weights
    h = states[0]
    u = h.shape[1]
    z = x @ kernel + bias
    f = _sigmoid(z[:, :u] + h @ recurrent_kernel[:, :u])
    h_tilde = np.tanh(z[:, u:] + (f * h) @ recurrent_kernel[:, u:])
    h = (1.0 - f) * h + f * h_tilde
    return h, [h]


def _lstm_step(weights, x, states):
    kernel, recurrent_kernel, bias = weights  # Keras' order of the gates: i, f, c, o
    h, c = states
    i, f, g, o = np.split(x @ kernel + h @ recurrent_kernel + bias, 4, axis=1)
    c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    h = _sigmoid(o) * np.tanh(c)
    return h, [h, c]


def _gru_step(weights, x, states):
    kernel, recurrent_kernel, bias = weights  # reset_after: bias (2, 3u); gates z, r, h
    h = states[0]
    xz, xr, xh = np.split(x @ kernel + bias[0], 3, axis=1)
    hz, hr, hh = np.split(h @ recurrent_kernel + bias[1], 3, axis=1)
    z, r = _sigmoid(xz + hz), _sigmoid(xr + hr)
    h = z * h + (1.0 - z) * np.tanh(xh + r * hh)
    return h, [h]


# --- the attentions: scores and alignments ---

def _bahdanau_energy(weights, query, memory):
    query_kernel, key_kernel, score_vector = weights[:3]
    hidden = np.tanh((query @ query_kernel)[:, None, :] + memory @ key_kernel)
    return hidden @ score_vector  # (B, S)


def _luong_energy(weights, query, memory):
    return np.einsum("bd,bsd->bs", query, memory @ weights[0])


def _softmax(energy, mask):
    energy = np.where(mask, energy, -np.inf)
    weights = np.exp(energy - energy.max(axis=1, keepdims=True))
    return weights / weights.sum(axis=1, keepdims=True)


def _numpy_wrapper(cell_step, cell_weights, energy, attention_weights, x, memory, memory_mask,
                   cell_states, kernel_c=None, output_attention=True, monotonic=False,
                   target_mask=None, initial_attention=None):
    """The wrapper over a whole target sequence: outputs, alignments, final states."""
    a = np.zeros((x.shape[0], D if kernel_c is None else kernel_c.shape[1]))
    if initial_attention is not None:
        a = initial_attention
    alignment = np.zeros((x.shape[0], S))
    if monotonic:
        alignment[:, 0] = 1.0
    output = np.zeros((x.shape[0], a.shape[1] if output_attention else U))
    outputs, alignments = [], []
    for t in range(x.shape[1]):
        y, new_cell_states = cell_step(cell_weights, np.concatenate([x[:, t], a], 1),
                                       cell_states)
        e = energy(attention_weights, y, memory)
        if monotonic:
            p = np.where(memory_mask, _sigmoid(e + attention_weights[-1]), 0.0)
            new_alignment = expected_alignment(p, alignment)
        else:
            new_alignment = _softmax(e, memory_mask)
        context = np.einsum("bs,bsd->bd", new_alignment, memory)
        new_a = context if kernel_c is None else np.concatenate([y, context], 1) @ kernel_c
        new_output = new_a if output_attention else y
        keep = np.ones((x.shape[0], 1), bool) if target_mask is None else target_mask[:, t, None]
        cell_states = [np.where(keep, n, o) for n, o in zip(new_cell_states, cell_states)]
        a = np.where(keep, new_a, a)
        alignment = np.where(keep, new_alignment, alignment)
        output = np.where(keep, new_output, output)
        outputs.append(output)
        alignments.append(alignment)
    return np.stack(outputs, 1), np.stack(alignments, 1), [*cell_states, a, alignment]


def _random_weights(rng, layer):
    weights = [rng.normal(0.0, 0.5, w.shape).astype("float32") for w in layer.get_weights()]
    layer.set_weights(weights)
    return [w.astype("float64") for w in weights]


def _split_weights(weights, cell_count, attention_count):
    return (weights[:cell_count], weights[cell_count:cell_count + attention_count],
            weights[cell_count + attention_count:])


CASES = {
    # cell, its NumPy step, its weight count, attention, its energy, weights, layer size, output_attention
    "user_cell_bahdanau": (lambda: MGUCell(U), _mgu_step, 3,
                           lambda: layers.BahdanauAttention(4), _bahdanau_energy, 3, 3, True),
    "keras_lstm_luong": (lambda: keras.layers.LSTMCell(U), _lstm_step, 3,
                         lambda: layers.LuongAttention(U), _luong_energy, 1, None, False),
    "gru_monotonic": (lambda: layers.GRUCell(U), _gru_step, 3,
                      lambda: layers.BahdanauMonotonicAttention(4, score_bias_init=-0.5),
                      _bahdanau_energy, 4, 3, True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_wrapper_is_the_addons_step_with_masks_and_initial_state(case, rng):
    make_cell, cell_step, cell_count, make_attention, energy, attention_count, size, out_att = (
        CASES[case])
    wrapper = layers.AttentionWrapper(make_cell(), make_attention(), attention_layer_size=size,
                                      alignment_history=True, output_attention=out_att)
    layer = layers.RNN(wrapper, return_sequences=True, return_state=True)
    x = rng.normal(size=(B, T, IN)).astype("float32")
    memory = rng.normal(size=(B, S, D)).astype("float32")
    memory_mask = np.arange(S)[None, :] < np.array([[7], [4], [2]])
    target_mask = np.arange(T)[None, :] < np.array([[5], [3], [1]])
    cell_states = [rng.normal(size=(B, U)).astype("float32")
                   for _ in range(2 if case == "keras_lstm_luong" else 1)]
    layer(x, memory=memory)  # builds
    cell_weights, attention_weights, rest = _split_weights(
        _random_weights(rng, layer), cell_count, attention_count)
    result = layer(x, memory=memory, memory_mask=memory_mask, mask=target_mask,
                   initial_state=cell_states)
    outputs, alignments, *states = (np.asarray(r) for r in result)
    expected, expected_alignments, expected_states = _numpy_wrapper(
        cell_step, cell_weights, energy, attention_weights, x.astype("float64"),
        memory.astype("float64"), memory_mask, [s.astype("float64") for s in cell_states],
        rest[0] if rest else None, out_att, "monotonic" in case, target_mask)
    np.testing.assert_allclose(outputs, expected, atol=1e-5)
    np.testing.assert_allclose(alignments, expected_alignments, atol=1e-5)
    assert len(states) == len(expected_states)
    for got, want in zip(states, expected_states):
        np.testing.assert_allclose(got, want, atol=1e-5)
    # Padding of the memory gets no weight.
    assert np.all(alignments[~np.broadcast_to(memory_mask[:, None], alignments.shape)] == 0.0)


@pytest.mark.parametrize("cell,attention", [("gru", "bahdanau"), ("lstm", "luong")])
def test_recurrent_decoder_is_the_wrapper_attending_from_the_previous_state(cell, attention,
                                                                            rng):
    # RecurrentDecoder (rnn_seq2seq's) runs the wrapper's step with a_{t-1}
    # recomputed from s_{t-1}: with a_0 = attention(s_0), its output is
    # [y_t; a_{t-1}] of the wrapper without W_c.
    decoder = layers.RecurrentDecoder(U, cell=cell, attention_units=4, attention=attention)
    x = rng.normal(size=(B, T, IN)).astype("float32")
    memory = rng.normal(size=(B, S, D)).astype("float32")
    memory_mask = np.arange(S)[None, :] < np.array([[7], [4], [2]])
    cell_states = [rng.normal(size=(B, U)).astype("float32")
                   for _ in range(2 if cell == "lstm" else 1)]
    decoder(x, memory)  # builds: the attention's weights, then the cell's
    attention_count = 3 if attention == "bahdanau" else 1
    weights = _random_weights(rng, decoder)
    attention_weights, cell_weights = weights[:attention_count], weights[attention_count:]
    got = np.asarray(decoder(x, memory, initial_state=cell_states,
                             encoder_outputs_mask=memory_mask))

    energy = _bahdanau_energy if attention == "bahdanau" else _luong_energy
    memory64, states64 = memory.astype("float64"), [s.astype("float64") for s in cell_states]
    a_0 = np.einsum("bs,bsd->bd", _softmax(energy(attention_weights, states64[0], memory64),
                                           memory_mask), memory64)
    run = {"cell_step": _gru_step if cell == "gru" else _lstm_step, "cell_weights": cell_weights,
           "energy": energy, "attention_weights": attention_weights,
           "x": x.astype("float64"), "memory": memory64, "memory_mask": memory_mask,
           "cell_states": states64, "initial_attention": a_0}
    a_t, _, _ = _numpy_wrapper(**run)
    y_t, _, _ = _numpy_wrapper(**run, output_attention=False)
    a_before = np.concatenate([a_0[:, None], a_t[:, :-1]], 1)
    np.testing.assert_allclose(got, np.concatenate([y_t, a_before], -1), atol=1e-5)


def _encoder_decoder(vocab=12, embed=4):
    """A functional encoder-decoder: the decoder is an RNN of the wrapped user cell."""
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    encoded, state = layers.RNN(MGUCell(U), return_sequences=True, return_state=True)(
        keras.layers.Embedding(vocab, embed, mask_zero=True)(source))
    decoder = layers.RNN(layers.AttentionWrapper(MGUCell(U), layers.LuongAttention(U),
                                                 attention_layer_size=U),
                         return_sequences=True, name="decoder")
    decoded = decoder(keras.layers.Embedding(vocab, embed, mask_zero=True)(target),
                      memory=encoded, initial_state=[state])
    logits = keras.layers.Dense(vocab)(decoded)
    return keras.Model([source, target], logits)


def test_a_wrapped_user_cell_trains_saves_and_reloads(rng, tmp_path):
    # Copy the source, shifted: a task the attention can solve.
    source = rng.integers(1, 12, size=(64, 6)).astype("int32")
    source[::2, 4:] = 0  # padding the encoder's mask hides from the attention
    target_in = np.concatenate([np.ones((64, 1), "int32"), source[:, :-1]], 1)
    keras.utils.set_random_seed(0)
    model = _encoder_decoder()
    model.compile(keras.optimizers.Adam(0.05),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit([source, target_in], source, epochs=12, batch_size=16, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.75 * losses[0]
    path = tmp_path / "wrapped.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(np.asarray(reloaded.predict([source, target_in], verbose=0)),
                               np.asarray(model.predict([source, target_in], verbose=0)),
                               atol=1e-5)
    # The memory's Keras mask reached the attention: padding changes nothing.
    longer = np.concatenate([source, np.zeros((64, 3), "int32")], 1)
    np.testing.assert_allclose(np.asarray(model.predict([longer, target_in], verbose=0)),
                               np.asarray(model.predict([source, target_in], verbose=0)),
                               atol=1e-5)


def test_the_wrapper_checks_what_it_is_given():
    memory = np.zeros((2, 3, 4), "float32")
    x = np.zeros((2, 2, 3), "float32")
    with pytest.raises(TypeError, match="AttentionWrapper.*attention"):
        layers.AttentionWrapper(layers.GRUCell(4), keras.layers.Attention())
    with pytest.raises(TypeError, match="AttentionWrapper.*cell"):
        layers.AttentionWrapper(keras.layers.Dense(4), layers.LuongAttention())
    with pytest.raises(ValueError, match="AttentionWrapper.*without dropout"):
        layers.AttentionWrapper(layers.GRUCell(4, dropout=0.1), layers.LuongAttention())
    wrapper = layers.AttentionWrapper(layers.GRUCell(4), layers.LuongAttention())
    with pytest.raises(ValueError, match="memory"):
        layers.RNN(wrapper)(x)
    with pytest.raises(ValueError, match="reads no memory"):
        layers.RNN(layers.GRUCell(4))(x, memory=memory)
    with pytest.raises(ValueError, match="stateful"):
        layers.RNN(layers.AttentionWrapper(layers.GRUCell(4), layers.LuongAttention()),
                   stateful=True)
    layer = layers.RNN(wrapper)
    with pytest.raises(ValueError, match="initial_state.*1 tensor"):
        layer(x, memory=memory, initial_state=[np.zeros((2, 4), "float32")] * 2)


@pytest.mark.tensorflow_only
@pytest.mark.slow
def test_a_wrapped_user_cell_streams_and_exports_with_builtin_ops(rng, tmp_path):
    import onnxruntime as ort
    from ai_edge_litert.interpreter import Interpreter

    from keras_seq.export import (
        convert_to_onnx,
        convert_to_tflite,
        initial_streaming_states,
        streaming_model,
    )
    from keras_seq.export.tflite_export import tflite_op_names

    # The decoder alone: the encoder's memory is an input, as a device feeds it.
    target = keras.Input((None, IN), name="target")
    memory_input = keras.Input((None, D), name="memory")
    layer = layers.RNN(layers.AttentionWrapper(MGUCell(U), layers.BahdanauAttention(4),
                                               attention_layer_size=3),
                       return_sequences=True, name="decoder")
    model = keras.Model([target, memory_input], layer(target, memory=memory_input))
    cell_weights, attention_weights, rest = _split_weights(_random_weights(rng, layer), 3, 3)
    x = rng.normal(size=(1, T, IN)).astype("float32")
    memory = rng.normal(size=(1, S, D)).astype("float32")
    expected, _, _ = _numpy_wrapper(
        _mgu_step, cell_weights, _bahdanau_energy, attention_weights, x.astype("float64"),
        memory.astype("float64"), np.ones((1, S), bool), [np.zeros((1, U))], rest[0])

    stream = streaming_model(model)
    states = initial_streaming_states(stream, 1, memory=memory)
    chunks = []
    for chunk in (x[:, :2], x[:, 2:3], x[:, 3:]):
        output, *states = stream([chunk, memory, *states])
        chunks.append(np.asarray(output))
    np.testing.assert_allclose(np.concatenate(chunks, 1), expected, atol=1e-5)

    flatbuffer = convert_to_tflite(stream)
    assert not any(name.startswith("FlexDelegate") or name == "CUSTOM"
                   for name in tflite_op_names(flatbuffer))
    runner = Interpreter(model_content=flatbuffer).get_signature_runner()
    states = initial_streaming_states(stream, 1, memory=memory)
    for t in range(T):  # one target step per call, the states fed back
        feeds = {spec.name: state for spec, state in zip(stream.inputs[2:], states)}
        result = runner(target=x[:, t:t + 1], memory=memory, **feeds)
        states = [result[f"output_{i + 1}"] for i in range(len(states))]
        np.testing.assert_allclose(result["output_0"], expected[:, t:t + 1], atol=1e-5)

    path = convert_to_onnx(model, tmp_path / "decoder.onnx")
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = session.run(None, {"target": x, "memory": memory})[0]
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_rnn_seq2seq_takes_a_registered_user_cell(rng, tmp_path):
    from keras_seq import models

    models.register_cell("wrapped_mgu", MGUCell)
    model = models.rnn_seq2seq(9, 9, units=U, embedding_dim=4, cell="wrapped_mgu",
                               attention="monotonic_luong")
    assert isinstance(model.get_layer("decoder").cell, MGUCell)
    source = rng.integers(1, 9, size=(2, 5)).astype("int32")
    inputs = {"encoder_inputs": source, "decoder_inputs": source[:, :3]}
    logits = np.asarray(model.predict(inputs, verbose=0))
    padded = {**inputs, "encoder_inputs": np.pad(source, ((0, 0), (0, 2)))}
    np.testing.assert_allclose(np.asarray(model.predict(padded, verbose=0)), logits, atol=1e-5)
    model.save(tmp_path / "user_cell_seq2seq.keras")
    reloaded = keras.saving.load_model(tmp_path / "user_cell_seq2seq.keras", safe_mode=True)
    np.testing.assert_allclose(np.asarray(reloaded.predict(inputs, verbose=0)), logits,
                               atol=1e-6)
