"""``zoneout=`` on `ConvertibleLSTM` and `ConvertibleSimpleRNN` (Keras' cells), every backend.

The reference is NumPy written from the equations: Keras' LSTM (gates i, f,
c, o) and the Elman RNN give the ordinary update s̃_t from s_{t−1}; at
inference s_t = z·s_{t−1} + (1 − z)·s̃_t, in training s_t = s_{t−1} where the
keep-mask is 1, else s̃_t; the output is the new h; a masked step keeps the
states and repeats the previous output (Keras' rule). Training masks are
fed in by replacing the layer's draw (`zoneout_masks`) with known arrays.
"""

import keras
import numpy as np
import pytest
from keras_rnn_reference import elman_step, lstm_step

from keras_seq import layers, models
from keras_seq.layers.recurrent import convertible_rnn, recurrent_decoder

B, T, IN, U = 3, 6, 4, 5

CLASSES = {"lstm": layers.ConvertibleLSTM, "simple": layers.ConvertibleSimpleRNN}
KERAS_CLASSES = {"lstm": keras.layers.LSTM, "simple": keras.layers.SimpleRNN}
NUM_STATES = {"lstm": 2, "simple": 1}


def _update(kind, weights, x_t, states):
    """The ordinary update of one step: [h̃] (Elman) or [h̃, c̃] (LSTM)."""
    kernel, recurrent_kernel, bias = weights
    z = x_t @ kernel + states[0] @ recurrent_kernel + bias
    return (lstm_step if kind == "lstm" else elman_step)(z, states)


def _reference(kind, weights, x, rates, mask=None, go_backwards=False, keep=None,
               initial=None):
    """Outputs (in processing order, as Keras) and final states.

    ``keep``: per state a ``(T, B, units)`` 0/1 array (time as in ``x``) or
    None, for training; without it, the inference mix.
    """
    units = weights[1].shape[0]
    states = initial or [np.zeros((x.shape[0], units), "float32")] * NUM_STATES[kind]
    output = np.zeros_like(states[0])
    outputs = []
    for t in (range(x.shape[1])[::-1] if go_backwards else range(x.shape[1])):
        new = _update(kind, weights, x[:, t], states)
        if keep is None:
            zoned = [z * s + (1 - z) * n for z, s, n in zip(rates, states, new)]
        else:
            zoned = [n if k is None else np.where(k[t] > 0.5, s, n)
                     for k, s, n in zip(keep, states, new)]
        if mask is None:
            output = zoned[0]
        else:
            m = mask[:, t, None]
            zoned = [np.where(m, zs, s) for zs, s in zip(zoned, states)]
            output = np.where(m, zoned[0], output)
        outputs.append(output)
        states = zoned
    return np.stack(outputs, 1), states


def _layer(kind, zoneout=0.0, seed=3, **kwargs):
    """A built layer (sequences and states returned) with weights of scale 0.4."""
    layer = CLASSES[kind](U, zoneout=zoneout, return_sequences=True, return_state=True,
                          seed=seed, **kwargs)
    layer(np.zeros((B, T, IN), "float32"))
    rng = np.random.default_rng(0)
    layer.set_weights([rng.normal(0.0, 0.4, np.shape(w)).astype("float32")
                       for w in layer.get_weights()])
    return layer


def _numpy(values):
    return [keras.ops.convert_to_numpy(v) for v in values]


def _inputs_and_mask():
    x = np.random.default_rng(1).normal(size=(B, T, IN)).astype("float32")
    mask = np.ones((B, T), bool)
    mask[0, 4:] = False  # right padding
    mask[2, 1] = False   # a masked step inside
    return x, mask


@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("kind, rates", [("lstm", [0.2, 0.6]), ("simple", [0.3])])
def test_inference_matches_numpy_with_a_mask(kind, rates, go_backwards):
    layer = _layer(kind, rates, go_backwards=go_backwards)
    weights = layer.get_weights()
    x, mask = _inputs_and_mask()
    outputs, *final = _numpy(layer(x, mask=mask))
    expected, states = _reference(kind, weights, x, rates, mask, go_backwards)
    np.testing.assert_allclose(outputs, expected, atol=1e-5)
    for got, want in zip(final, states):
        np.testing.assert_allclose(got, want, atol=1e-5)
    # The reference's conventions (order, masking) are Keras': at z = 0 it is Keras' layer.
    plain = KERAS_CLASSES[kind](U, return_sequences=True, go_backwards=go_backwards)
    plain(x)
    plain.set_weights(weights)
    np.testing.assert_allclose(_numpy([plain(x, mask=mask)])[0],
                               _reference(kind, weights, x, [0.0] * len(rates), mask,
                                          go_backwards)[0], atol=1e-5)


def _fed_masks(monkeypatch, module, keep):
    """Makes ``module``'s draw of zoneout masks return ``keep`` (one array or None per state)."""
    drawn = []

    def fake(rates, state_size, shape_prefix, seed_generator, dtype):
        drawn.append(tuple(int(d) for d in shape_prefix))
        return [None if k is None else keras.ops.convert_to_tensor(k.astype(dtype))
                for k in keep]

    monkeypatch.setattr(module, "zoneout_masks", fake)
    return drawn


@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("kind, rates", [("lstm", [0.4, 0.5]), ("simple", [0.5])])
def test_training_with_given_masks_matches_numpy(kind, rates, go_backwards, monkeypatch):
    layer = _layer(kind, rates, go_backwards=go_backwards)
    x, mask = _inputs_and_mask()
    rng = np.random.default_rng(2)
    keep = [(rng.random((T, B, U)) < z).astype("float32") for z in rates]
    drawn = _fed_masks(monkeypatch, convertible_rnn, keep)
    outputs, *final = _numpy(layer(x, mask=mask, training=True))
    assert drawn == [(T, B)]  # every step's masks drawn once, before the loop
    expected, states = _reference(kind, layer.get_weights(), x, rates, mask, go_backwards,
                                  keep)
    np.testing.assert_allclose(outputs, expected, atol=1e-5)
    for got, want in zip(final, states):
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("kind", ["lstm", "simple"])
def test_the_kept_fraction_of_h_is_z_with_fresh_masks(kind):
    z = 0.3
    layer = CLASSES[kind](48, zoneout=z, return_sequences=True, seed=0)
    x = np.random.default_rng(3).normal(size=(16, 30, 8)).astype("float32")  # 22k units
    h = _numpy([layer(x, training=True)])[0]
    same = h[:, 1:] == h[:, :-1]  # a fresh update equal to the previous value: probability ~0
    assert abs(same.mean() - z) < 0.015, same.mean()
    # Fresh masks at every step and at every call.
    assert not np.array_equal(same[:, 0], same[:, 1])
    again = _numpy([layer(x, training=True)])[0]
    assert not np.array_equal(again == np.roll(again, 1, axis=1), h == np.roll(h, 1, axis=1))


@pytest.mark.parametrize("kind", ["lstm", "simple"])
def test_zero_zoneout_is_keras_layer_bit_for_bit(kind, monkeypatch):
    x, mask = _inputs_and_mask()
    ours = _layer(kind, 0.0)
    plain = KERAS_CLASSES[kind](U, return_sequences=True, return_state=True)
    plain(x)
    plain.set_weights(ours.get_weights())
    assert "zoneout" not in ours.get_config()
    for got, want in zip(ours(x, mask=mask, training=True), plain(x, mask=mask, training=True)):
        np.testing.assert_array_equal(*_numpy([got, want]))
    tolerance = 1e-6 if keras.backend.backend() == "tensorflow" else 0.0  # TF: the convertible loop
    for got, want in zip(ours(x, mask=mask), plain(x, mask=mask)):
        np.testing.assert_allclose(*_numpy([got, want]), rtol=0.0, atol=tolerance)
    # Keras' own loop (with its cuDNN kernel where available) runs only without zoneout.
    calls = []
    keras_loop = KERAS_CLASSES[kind].inner_loop

    def spy(self, *args, **kwargs):
        calls.append(self.name)
        return keras_loop(self, *args, **kwargs)

    monkeypatch.setattr(KERAS_CLASSES[kind], "inner_loop", spy)
    ours(x, training=True)
    assert calls == [ours.name]
    zoned = _layer(kind, 0.2)
    zoned(x, training=True)
    zoned(x)
    assert calls == [ours.name]


def test_bidirectional_stateful_and_fit_carry_zoneout():
    x = np.random.default_rng(4).normal(size=(B, T, IN)).astype("float32")
    bidirectional = keras.layers.Bidirectional(
        layers.ConvertibleLSTM(U, zoneout=[0.1, 0.3], return_sequences=True, seed=1))
    bidirectional(x)
    assert bidirectional.backward_layer.zoneout == [0.1, 0.3]
    # Stateful: two halves carry the zoned states as one whole sequence does.
    stateful = layers.ConvertibleSimpleRNN(U, zoneout=0.4, stateful=True, return_sequences=True)
    whole = layers.ConvertibleSimpleRNN(U, zoneout=0.4, return_sequences=True)
    stateful(x[:, :2])
    whole(x)
    whole.set_weights(stateful.get_weights())
    stateful.reset_state()
    halves = np.concatenate(_numpy([stateful(x[:, :2]), stateful(x[:, 2:])]), 1)
    np.testing.assert_allclose(halves, _numpy([whole(x)])[0], atol=1e-5)
    # Training compiles on every backend (masks drawn in the train step).
    inputs = keras.Input((T, IN))
    model = keras.Model(inputs, keras.layers.Dense(1)(bidirectional(inputs)))
    model.compile("adam", "mse")
    before = _numpy(model.get_weights())
    history = model.fit(x, np.ones((B, T, 1), "float32"), epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert any(not np.array_equal(b, a) for b, a in zip(before, _numpy(model.get_weights())))


def test_zoneout_survives_keras_files_in_safe_mode(tmp_path):
    inputs = keras.Input((None, IN))
    h = keras.layers.Bidirectional(layers.ConvertibleLSTM(U, zoneout=[0.1, 0.3],
                                                          return_sequences=True))(inputs)
    model = keras.Model(inputs, layers.ConvertibleSimpleRNN(U, zoneout=0.2)(h))
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert loaded.layers[1].forward_layer.zoneout == [0.1, 0.3]
    assert loaded.layers[1].backward_layer.zoneout == [0.1, 0.3]
    assert loaded.layers[2].zoneout == 0.2
    x = np.random.default_rng(5).normal(size=(B, T, IN)).astype("float32")
    np.testing.assert_allclose(*_numpy([loaded(x), model(x)]), atol=1e-6)


@pytest.mark.parametrize(
    "kind, zoneout, error, words",
    [("lstm", 1.0, ValueError, r"zoneout.*\[0.0, 1.0\)"), ("lstm", -0.1, ValueError, "zoneout"),
     ("lstm", [0.1, 0.2, 0.3], ValueError, r"one per state \(2"),
     ("simple", [0.1, 0.2], ValueError, r"one per state \(1"),
     ("simple", [], ValueError, "zoneout"), ("lstm", "0.1", TypeError, "zoneout")],
)
def test_bad_zoneout_is_named(kind, zoneout, error, words):
    with pytest.raises(error, match=words) as raised:
        CLASSES[kind](4, zoneout=zoneout, name="named")
    assert f"{CLASSES[kind].__name__} 'named'" in str(raised.value)
    if error is ValueError:  # the decoder with the same cell, before it is built
        with pytest.raises(error, match="RecurrentDecoder.*" + words):
            models.RecurrentDecoder(4, cell=kind, zoneout=zoneout)


@pytest.mark.parametrize("kind, rates", [("lstm", [0.2, 0.5]), ("simple", [0.4])])
def test_decoder_with_keras_cells_zones_out_like_the_layers(kind, rates, monkeypatch):
    decoder = models.RecurrentDecoder(U, cell=kind, zoneout=rates)
    y = np.random.default_rng(6).normal(size=(B, T, IN)).astype("float32")
    rng = np.random.default_rng(7)
    s0 = [rng.normal(size=(B, U)).astype("float32") for _ in rates]
    decoder(y, initial_state=s0)
    weights = decoder.cell.get_weights()
    expected, _ = _reference(kind, weights, y, rates, initial=s0)
    np.testing.assert_allclose(_numpy([decoder(y, initial_state=s0)])[0], expected, atol=1e-5)
    keep = [(rng.random((T, B, U)) < z).astype("float32") for z in rates]
    _fed_masks(monkeypatch, recurrent_decoder, keep)
    expected, _ = _reference(kind, weights, y, rates, keep=keep, initial=s0)
    np.testing.assert_allclose(_numpy([decoder(y, initial_state=s0, training=True)])[0],
                               expected, atol=1e-5)


def test_seq2seq_builder_passes_zoneout_to_keras_cells():
    model = models.rnn_seq2seq(12, 10, units=4, embedding_dim=3, cell="lstm", zoneout=0.1)
    encoder = model.get_layer("encoder").get_layer("bidirectional_encoder")
    assert encoder.forward_layer.zoneout == encoder.backward_layer.zoneout == 0.1
    assert model.get_layer("decoder").zoneout == 0.1  # its step: the test above


@pytest.mark.tensorflow_only  # TFLite export and streaming
def test_export_fusion_and_streaming_match_keras_inference(rng):
    from keras_seq.export import (
        convert_to_tflite,
        initial_streaming_states,
        run_tflite,
        streaming_model,
        tflite_op_names,
    )

    inputs = keras.Input((None, IN))
    h = layers.ConvertibleLSTM(U, zoneout=0.3, return_sequences=True)(inputs)
    model = keras.Model(inputs, layers.ConvertibleSimpleRNN(U, zoneout=0.2,
                                                             return_sequences=True)(h))
    for weights in model.trainable_weights:
        weights.assign(rng.normal(0.0, 0.5, weights.shape))
    x = rng.normal(size=(B, T, IN)).astype("float32")
    expected = np.asarray(model(x))
    flatbuffer = convert_to_tflite(model)
    assert not [op for op in tflite_op_names(flatbuffer) if op.startswith("CUSTOM")]
    np.testing.assert_allclose(run_tflite(flatbuffer, x)[0], expected, atol=1e-5)
    # The fused kernel computes a plain LSTM: a zoned-out LSTM keeps its loop.
    with pytest.warns(UserWarning, match="zoneout"):
        fused = convert_to_tflite(model, fuse_lstm=True, batch_size=B)
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" not in tflite_op_names(fused)
    np.testing.assert_allclose(run_tflite(fused, x)[0], expected, atol=1e-5)
    # Streaming, chunk by chunk, in Keras and in TFLite.
    stream = streaming_model(model)
    stream_flatbuffer = convert_to_tflite(stream)
    for run in (lambda *a: _numpy(stream(list(a))), lambda *a: run_tflite(stream_flatbuffer, *a)):
        states, pieces = initial_streaming_states(stream, B), []
        for start, end in ((0, 2), (2, 3), (3, T)):
            out = run(x[:, start:end], *states)
            pieces.append(out[0])
            states = [np.asarray(s) for s in out[1:]]
        np.testing.assert_allclose(np.concatenate(pieces, 1), expected, atol=1e-5)
