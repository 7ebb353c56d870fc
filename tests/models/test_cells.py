"""The builders' ``cell="lstm"`` and ``cell="simple"`` layers are Keras' LSTM and
SimpleRNN with a convertible inference loop."""

import keras
import numpy as np
import pytest

from keras_seq.models._cells import (
    CELL_NAMES,
    ConvertibleLSTM,
    ConvertibleSimpleRNN,
    num_states,
    recurrent_classes,
)

PAIRS = [(keras.layers.LSTM, ConvertibleLSTM), (keras.layers.SimpleRNN, ConvertibleSimpleRNN)]


@pytest.mark.parametrize("classes", PAIRS, ids=["lstm", "simple"])
@pytest.mark.parametrize("kwargs", [
    {"return_sequences": True},
    {"go_backwards": True, "return_state": True},
])
@pytest.mark.parametrize("training", [False, True])
def test_convertible_layer_equals_keras_layer_with_copied_weights(classes, kwargs, training, rng):
    x = rng.normal(size=(3, 11, 4)).astype("float32")
    mask = np.arange(11)[None] < np.array([[11], [7], [1]])
    reference, ours = classes[0](5, **kwargs), classes[1](5, **kwargs)
    reference.build(x.shape)
    ours.build(x.shape)
    weights = [rng.normal(0.0, 0.6, w.shape).astype("float32") for w in reference.get_weights()]
    reference.set_weights(weights)
    ours.set_weights(weights)
    expected = keras.tree.flatten(reference(x, mask=mask, training=training))
    got = keras.tree.flatten(ours(x, mask=mask, training=training))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, atol=1e-6)


@pytest.mark.parametrize("cls", [ConvertibleLSTM, ConvertibleSimpleRNN])
def test_convertible_layer_round_trips_through_keras_file(cls, tmp_path, rng):
    inputs = keras.Input((None, 3))
    model = keras.Model(inputs, cls(4)(inputs))
    x = rng.normal(size=(2, 6, 3)).astype("float32")
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    assert type(loaded.layers[-1]) is cls
    np.testing.assert_allclose(loaded(x), model(x), atol=1e-7)


def test_state_count_matches_the_cell_state_size():
    for cell in CELL_NAMES:
        state_size = recurrent_classes(cell)[1](3).state_size
        expected = len(state_size) if isinstance(state_size, (list, tuple)) else 1
        assert num_states(cell) == expected, cell
