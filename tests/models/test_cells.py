"""The builders' ``cell="lstm"`` layer is Keras' LSTM with a convertible inference loop."""

import keras
import numpy as np
import pytest

from keras_seq.models._cells import ConvertibleLSTM


@pytest.mark.parametrize("kwargs", [
    {"return_sequences": True},
    {"go_backwards": True, "return_state": True},
])
@pytest.mark.parametrize("training", [False, True])
def test_convertible_lstm_equals_keras_lstm_with_copied_weights(kwargs, training, rng):
    x = rng.normal(size=(3, 11, 4)).astype("float32")
    mask = np.arange(11)[None] < np.array([[11], [7], [1]])
    reference, ours = keras.layers.LSTM(5, **kwargs), ConvertibleLSTM(5, **kwargs)
    reference.build(x.shape)
    ours.build(x.shape)
    weights = [rng.normal(0.0, 0.6, w.shape).astype("float32") for w in reference.get_weights()]
    reference.set_weights(weights)
    ours.set_weights(weights)
    expected = keras.tree.flatten(reference(x, mask=mask, training=training))
    got = keras.tree.flatten(ours(x, mask=mask, training=training))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, atol=1e-6)


def test_convertible_lstm_round_trips_through_keras_file(tmp_path, rng):
    inputs = keras.Input((None, 3))
    model = keras.Model(inputs, ConvertibleLSTM(4)(inputs))
    x = rng.normal(size=(2, 6, 3)).astype("float32")
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    assert type(loaded.layers[-1]) is ConvertibleLSTM
    np.testing.assert_allclose(loaded(x), model(x), atol=1e-7)
