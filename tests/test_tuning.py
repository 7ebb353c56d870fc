"""KerasTuner search spaces: built models follow the hyperparameters; a search runs."""

import keras
import keras_tuner
import numpy as np
import pytest

from keras_seq import layers
from keras_seq.models._cells import ConvertibleLSTM
from keras_seq.tuning import ClassifierHyperModel, Seq2SeqHyperModel

_EXPECTED_LAYER = {
    "gru": layers.GRU,
    "lstm": ConvertibleLSTM,  # Keras' LSTM with a convertible inference loop
    "peephole": layers.PeepholeLSTM,
    "coupled": layers.CoupledGateLSTM,
}


def _encoder_layers(model):
    return [
        layer.forward_layer
        for layer in model._flatten_layers()
        if isinstance(layer, keras.layers.Bidirectional)
    ]


@pytest.mark.parametrize("cell", sorted(_EXPECTED_LAYER))
def test_seq2seq_hypermodel_builds_the_chosen_cell_and_sizes(cell):
    hp = keras_tuner.HyperParameters()
    hp.Fixed("cell", cell)
    hp.Fixed("units", 16)
    hp.Fixed("learning_rate", 3e-3)
    model = Seq2SeqHyperModel(12, 9, units=(8, 16), embedding_dims=(4,)).build(hp)
    (encoder,) = _encoder_layers(model)
    assert type(encoder) is _EXPECTED_LAYER[cell]
    assert encoder.units == 16
    assert float(model.optimizer.learning_rate) == pytest.approx(3e-3)
    # The final Dense projects onto the target vocabulary.
    assert model.output.shape[-1] == 9


def test_classifier_search_records_scores_that_the_best_model_reproduces(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(1, 10, size=(96, 7)).astype("int32")
    y = (x[:, 0] % 2).astype("int32")  # class = parity of the first token
    tuner = keras_tuner.RandomSearch(
        ClassifierHyperModel(10, 2, cells=("gru", "coupled"), units=(8,), max_layers=1),
        objective="val_loss",
        max_trials=2,
        seed=1,
        directory=str(tmp_path),
        project_name="search",
    )
    tuner.search(x[:64], y[:64], validation_data=(x[64:], y[64:]), epochs=1, verbose=0)

    trials = list(tuner.oracle.trials.values())
    assert len(trials) == 2
    best_trial = tuner.oracle.get_best_trials(1)[0]
    assert best_trial.score == min(t.score for t in trials)
    # The best model, reloaded from its checkpoint, gives the score the tuner recorded.
    best_model = tuner.get_best_models(1)[0]
    val_loss = best_model.evaluate(x[64:], y[64:], verbose=0, return_dict=True)["loss"]
    assert val_loss == pytest.approx(best_trial.score, rel=1e-4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cells": ("gru", "rnn")}, "Seq2SeqHyperModel: invalid value for argument `cells`"),
        ({"units": (0,)}, "Seq2SeqHyperModel: invalid value for argument `units`"),
        ({"attention": ()}, "Seq2SeqHyperModel: invalid value for argument `attention`: expected at least one"),
        ({"max_dropout": 1.0}, r"Seq2SeqHyperModel: invalid value for argument `max_dropout`: expected a number in \[0.0, 1.0\)"),
        ({"learning_rate": (1e-2, 1e-3)}, "Seq2SeqHyperModel: invalid value for argument `learning_rate`"),
    ],
)
def test_seq2seq_hypermodel_rejects_bad_search_spaces(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Seq2SeqHyperModel(10, 10, **kwargs)


def test_hypermodels_accept_numpy_integers_and_reject_bools():
    hypermodel = Seq2SeqHyperModel(np.int64(12), 9, units=(np.int32(8),), embedding_dims=(4,))
    assert hypermodel.units == [8] and type(hypermodel.units[0]) is int
    with pytest.raises(TypeError, match="Seq2SeqHyperModel: invalid type for argument `units`"):
        Seq2SeqHyperModel(12, 9, units=(True,))
    with pytest.raises(TypeError, match="ClassifierHyperModel: invalid type for argument `max_layers`"):
        ClassifierHyperModel(10, 2, max_layers=False)


def test_classifier_hypermodel_rejects_widths_that_heads_do_not_divide():
    with pytest.raises(ValueError, match="ClassifierHyperModel: invalid value for argument `units`: expected widths divisible"):
        ClassifierHyperModel(10, 2, kinds=("transformer",), units=(30,), num_heads=4)
