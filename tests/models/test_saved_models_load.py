"""`.keras` files saved before the builders' layer classes moved from
`keras_seq.models` to `keras_seq.layers` still load and compute what they did.

The files in `tests/models/data/` were saved at commit 411d73b (see
`make_pre_move_models.py` there), with their outputs on the ids stored beside
them; each holds at least one of the moved classes.
"""

import os

import keras
import numpy as np
import pytest

from keras_seq import layers, models
from keras_seq.layers.convolutional._top_features import TopFeatures

DATA = os.path.join(os.path.dirname(__file__), "data")

# The name each class was registered under before the move; saved files name it.
REGISTERED_BEFORE_THE_MOVE = {
    layers.ConvertibleLSTM: "keras_seq>ConvertibleLSTM",
    layers.ConvertibleSimpleRNN: "keras_seq>ConvertibleSimpleRNN",
    layers.PaddingMask: "keras_seq>PaddingMask",
    layers.RecurrentDecoder: "keras_seq>RecurrentDecoder",
    layers.TokenEmbedding: "keras_seq>TokenEmbedding",
    layers.WideConvolution1D: "keras_seq>WideConvolution1D",
    TopFeatures: "keras_seq>_TopFeatures",
}

# file -> the moved classes it holds
SAVED_MODELS = {
    "rnn_seq2seq_lstm": {layers.ConvertibleLSTM, layers.RecurrentDecoder},
    "language_model_simple": {layers.ConvertibleSimpleRNN},
    "language_model_transformer": {layers.TokenEmbedding, layers.PaddingMask},
    "dcnn_classifier": {layers.WideConvolution1D, TopFeatures},
}


def _all_layers(model):
    """The layers of ``model``, of its nested models and inside `Bidirectional`."""
    for layer in model.layers:
        yield layer
        if isinstance(layer, keras.Model):
            yield from _all_layers(layer)
        if isinstance(layer, keras.layers.Bidirectional):
            yield layer.forward_layer
            yield layer.backward_layer


def _inputs(name, ids):
    return [ids, ids] if name.startswith("rnn_seq2seq") else ids


@pytest.mark.parametrize("cls", REGISTERED_BEFORE_THE_MOVE, ids=lambda c: c.__name__)
def test_moved_class_keeps_its_registered_name(cls):
    name = REGISTERED_BEFORE_THE_MOVE[cls]
    assert keras.saving.get_registered_name(cls) == name
    assert keras.saving.get_registered_object(name) is cls


def test_models_still_exports_the_moved_layers():
    for name in ("PaddingMask", "RecurrentDecoder", "TokenEmbedding", "WideConvolution1D"):
        assert getattr(models, name) is getattr(layers, name), name
        assert name in models.__all__ and name in layers.__all__, name


@pytest.mark.parametrize("name", SAVED_MODELS)
def test_keras_file_saved_before_the_move_loads_and_computes_the_same(name, tmp_path):
    expected = np.load(os.path.join(DATA, "pre_move_outputs.npz"))
    ids = expected["ids"]
    model = keras.saving.load_model(os.path.join(DATA, f"{name}.keras"), safe_mode=True)
    assert SAVED_MODELS[name] <= {type(layer) for layer in _all_layers(model)}
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model(_inputs(name, ids), training=False)),
        expected[name], atol=1e-5,
    )
    # Saved again with the moved classes, it loads again.
    model.save(tmp_path / "again.keras")
    again = keras.saving.load_model(tmp_path / "again.keras", safe_mode=True)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(again(_inputs(name, ids), training=False)),
        expected[name], atol=1e-5,
    )
