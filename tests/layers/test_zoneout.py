"""``zoneout=`` on every recurrent layer and cell (Krueger et al. 2017), on every backend.

The reference: the same layer without zoneout supplies the ordinary update
(h̃, c̃) from given states through its cell (checked against NumPy and Keras
in the other layer tests); the zoneout equations are written here in NumPy:
at inference s_t = z·s_{t−1} + (1 − z)·s̃_t, in training each unit is either
s_{t−1} (probability z) or s̃_t.
"""

import keras
import numpy as np
import pytest

from keras_seq import layers

B, T, IN, U = 3, 6, 4, 5

KINDS = {
    "peephole": (layers.PeepholeLSTM, {}),
    "cifg": (layers.CoupledGateLSTM, {"use_peepholes": True}),
    "gru": (layers.GRU, {}),
    "ntm": (layers.NTM, {"memory_size": 4, "memory_width": 3}),
}


def _pair(kind, zoneout, **kwargs):
    """(layer with zoneout, the same layer without, same weights), built."""
    cls, extra = KINDS[kind]
    zoned = cls(U, zoneout=zoneout, return_sequences=True, return_state=True, seed=3,
                **extra, **kwargs)
    plain = cls(U, return_sequences=True, return_state=True, **extra, **kwargs)
    x = np.zeros((B, T, IN), "float32")
    zoned(x)
    plain(x)
    rng = np.random.default_rng(0)
    weights = [rng.normal(0.0, 0.4, np.shape(w)).astype("float32") for w in plain.get_weights()]
    plain.set_weights(weights)
    zoned.set_weights(weights)
    return zoned, plain


def _step(plain, x_t, states):
    """The ordinary update of one step from ``states``: (output, new states)."""
    output, new_states = plain.cell(x_t, [keras.ops.convert_to_tensor(s) for s in states])
    return keras.ops.convert_to_numpy(output), [keras.ops.convert_to_numpy(s) for s in new_states]


def _initial(plain):
    return [keras.ops.convert_to_numpy(s) for s in plain.cell.get_initial_state(batch_size=B)]


@pytest.mark.parametrize("kind", list(KINDS))
def test_inference_mixes_each_state_with_its_previous_value(kind):
    rates = 0.3 if kind != "peephole" else [0.2, 0.6]  # one per state (h, c)
    zoned, plain = _pair(kind, rates)
    x = np.random.default_rng(1).normal(size=(B, T, IN)).astype("float32")
    outputs, *final = zoned(x)
    states = _initial(plain)
    z = rates if isinstance(rates, list) else [rates] * len(states)
    expected = []
    for t in range(T):
        output, new = _step(plain, x[:, t], states)
        states = [zi * old + (1 - zi) * n for zi, old, n in zip(z, states, new)]
        # The output is the new h (the NTM's output is its own, from the step).
        expected.append(states[0] if kind != "ntm" else output)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(outputs), np.stack(expected, 1),
                               atol=2e-5)
    for got, want in zip(final, states):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(got), want, atol=2e-5)


@pytest.mark.parametrize("kind", ["peephole", "gru"])
def test_training_keeps_each_unit_of_h_or_updates_it_with_fresh_masks(kind):
    # The LSTM's c is not zoned out here ([z, 0]) so the path is known from h.
    zoneout = 0.4 if kind == "gru" else [0.4, 0.0]
    zoned, plain = _pair(kind, zoneout)
    x = np.random.default_rng(2).normal(size=(B, T, IN)).astype("float32")
    outputs, *final = zoned(x, training=True)
    outputs = keras.ops.convert_to_numpy(outputs)
    states = _initial(plain)
    kept = []
    for t in range(T):
        _, new = _step(plain, x[:, t], states)
        h = outputs[:, t]
        keep_h = np.isclose(h, states[0], atol=1e-6)
        take_h = np.isclose(h, new[0], atol=1e-6)
        assert np.all(keep_h | take_h)  # every unit: its previous value or its update
        kept.append(keep_h & ~take_h)
        states = [h, *new[1:]]
    for got, want in zip(final, states):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(got), want, atol=1e-5)
    kept = np.stack(kept)
    assert kept.any()
    # Fresh masks at each step (not one mask for the sequence) ...
    assert not all(np.array_equal(kept[0], kept[t]) for t in range(1, T))
    # ... and at each call.
    again = keras.ops.convert_to_numpy(zoned(x, training=True)[0])
    assert not np.allclose(again, outputs)


def test_the_kept_fraction_is_z():
    z = 0.3
    layer = layers.GRU(64, zoneout=z, return_sequences=True, seed=0)
    x = np.random.default_rng(3).normal(size=(32, 40, 8)).astype("float32")
    h = keras.ops.convert_to_numpy(layer(x, training=True))
    same = np.isclose(h[:, 1:], h[:, :-1], atol=0.0, rtol=0.0)
    # A fresh update equal to the previous value has probability ~0.
    assert abs(same.mean() - z) < 0.015, same.mean()


def test_zero_rate_for_h_and_a_half_for_c_zone_out_only_c():
    zoned, plain = _pair("peephole", [0.0, 0.5])
    x = np.random.default_rng(4).normal(size=(B, T, IN)).astype("float32")
    states = _initial(plain)
    kept = []
    for t in range(T):  # one step per call, states carried: c is visible
        _, h, c = (keras.ops.convert_to_numpy(v) for v in
                   zoned(x[:, t : t + 1], initial_state=states, training=True))
        _, new = _step(plain, x[:, t], states)
        np.testing.assert_allclose(h, new[0], atol=1e-5)  # h: always its update
        keep_c = np.isclose(c, states[1], atol=1e-6)
        assert np.all(keep_c | np.isclose(c, new[1], atol=1e-6))
        kept.append(keep_c)
        states = [h, c]
    assert 0.3 < np.mean(kept) < 0.7


def test_the_cell_call_applies_zoneout_too():
    cell = layers.GRUCell(U, zoneout=0.25)
    plain = layers.GRUCell(U)
    x = np.random.default_rng(5).normal(size=(B, IN)).astype("float32")
    h = np.random.default_rng(6).normal(size=(B, U)).astype("float32")
    cell(x, [h])
    plain(x, [h])
    plain.set_weights(cell.get_weights())
    out, [new] = cell(x, [h])
    _, [ordinary] = plain(x, [h])
    expected = 0.25 * h + 0.75 * keras.ops.convert_to_numpy(ordinary)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(new), expected, atol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out), expected, atol=1e-5)
    rnn = keras.layers.RNN(cell, return_sequences=True)  # Keras' loop, our cell
    seq = np.random.default_rng(7).normal(size=(B, T, IN)).astype("float32")
    ours = layers.GRU(U, zoneout=0.25, return_sequences=True)
    ours(seq)
    rnn(seq)
    ours.set_weights(rnn.get_weights())
    np.testing.assert_allclose(keras.ops.convert_to_numpy(rnn(seq)),
                               keras.ops.convert_to_numpy(ours(seq)), atol=1e-5)


def test_a_padded_step_keeps_the_zoned_state():
    zoned, plain = _pair("gru", 0.5)
    x = np.random.default_rng(8).normal(size=(B, T, IN)).astype("float32")
    mask = np.ones((B, T), bool)
    mask[0, 4:] = False
    _, h = zoned(x, mask=mask)
    _, h_short = zoned(x[:1, :4])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(h)[0],
                               keras.ops.convert_to_numpy(h_short)[0], atol=1e-5)


@pytest.mark.parametrize(
    "zoneout, words",
    [(1.0, r"zoneout.*\[0.0, 1.0\)"), (-0.1, "zoneout"), ([0.1, 0.2, 0.3], r"one per state \(2"),
     ([], "zoneout"), ("0.1", "zoneout")],
)
def test_bad_zoneout_is_named(zoneout, words):
    with pytest.raises((ValueError, TypeError), match=words) as error:
        layers.PeepholeLSTM(4, zoneout=zoneout)
    assert "PeepholeLSTM" in str(error.value)


def test_zoneout_survives_config_and_keras_files(tmp_path):
    x = keras.Input((None, IN))
    model = keras.Model(x, layers.PeepholeLSTM(U, zoneout=[0.1, 0.3])(x))
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert loaded.layers[1].zoneout == [0.1, 0.3]
    seq = np.random.default_rng(9).normal(size=(B, T, IN)).astype("float32")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(seq)),
                               keras.ops.convert_to_numpy(model(seq)), atol=1e-6)


@pytest.mark.tensorflow_only  # TFLite export
def test_a_zoneout_model_exports_and_streams_like_any_other():
    from keras_seq.export import (
        convert_to_tflite,
        initial_streaming_states,
        run_tflite,
        streaming_model,
        tflite_op_names,
    )

    x = keras.Input((None, IN))
    h = layers.GRU(U, zoneout=0.3, return_sequences=True)(x)
    model = keras.Model(x, layers.PeepholeLSTM(U, zoneout=[0.2, 0.5], return_sequences=True)(h))
    seq = np.random.default_rng(10).normal(size=(B, T, IN)).astype("float32")
    flatbuffer = convert_to_tflite(model)
    assert not [op for op in tflite_op_names(flatbuffer) if op.startswith("CUSTOM")]
    np.testing.assert_allclose(run_tflite(flatbuffer, seq)[0], np.asarray(model(seq)), atol=1e-5)
    stream = streaming_model(model)
    states = initial_streaming_states(stream, B)
    pieces = []
    for start, end in ((0, 2), (2, T)):
        out = run_tflite(convert_to_tflite(stream), seq[:, start:end], *states)
        pieces.append(out[0])
        states = out[1:]
    np.testing.assert_allclose(np.concatenate(pieces, 1), np.asarray(model(seq)), atol=1e-5)
