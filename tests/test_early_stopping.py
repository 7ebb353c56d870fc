"""A classifier run stops on its validation loss and keeps its best epoch
(`keras_seq.training.backup.BestEpoch`).

The reference is Keras' own ``EarlyStopping(patience=P,
restore_best_weights=True)``: the same model, data and seed trained with
each must stop after the same epoch with the same weights. A resumed run
reads its best epoch back from ``history.csv``.
"""

import keras
import numpy as np
import pytest

from keras_seq.training.backup import BEST_WEIGHTS_FILE, BestEpoch

pytestmark = pytest.mark.tensorflow_only


def _fit(callback, epochs=40):
    """A Dense model that overfits 24 noisy examples: its validation loss
    falls, then rises."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 6)).astype("float32")
    y = (x[:, :1] + rng.normal(scale=1.0, size=(32, 1))).astype("float32")
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(32, activation="tanh"),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.03), "mse")
    history = model.fit(x[:24], y[:24], validation_data=(x[24:], y[24:]), epochs=epochs,
                        batch_size=8, shuffle=False, verbose=0, callbacks=[callback])
    return model, history.history


def test_stops_and_restores_as_keras_early_stopping(tmp_path):
    patience = 3
    keras_model, keras_history = _fit(keras.callbacks.EarlyStopping(
        patience=patience, restore_best_weights=True))
    best = BestEpoch(patience, str(tmp_path / "backup"), str(tmp_path / "history.csv"), 0)
    model, history = _fit(best)
    trained = len(history["val_loss"])
    assert trained == len(keras_history["val_loss"]) < 40  # it stopped early
    assert best.best_epoch == int(np.argmin(history["val_loss"])) + 1 < trained
    assert best.restore_best(model, trained)
    for ours, theirs in zip(model.get_weights(), keras_model.get_weights()):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
    assert (tmp_path / "backup" / BEST_WEIGHTS_FILE).is_file()


def test_a_resumed_run_reads_its_best_epoch_from_the_history(tmp_path):
    history = tmp_path / "history.csv"
    history.write_text(
        "epoch,step,wall_seconds,loss,val_loss,perplexity,val_perplexity\n"
        "1,3,1.0,0.9,0.80,,\n2,6,2.0,0.7,0.55,,\n3,9,3.0,0.5,0.61,,\n"
        "4,12,4.0,0.4,0.58,,\n5,15,5.0,0.3,0.40,,\n", encoding="utf-8")
    # Resumed after epoch 4: the row of epoch 5 (after that backup) is not read.
    best = BestEpoch(2, str(tmp_path), str(history), epoch=4)
    assert (best.best, best.best_epoch) == (0.55, 2)
    assert best.done(4) and not best.done(3)  # two epochs past the best: stopped
    assert not BestEpoch(3, str(tmp_path), str(history), epoch=4).done(4)
    assert BestEpoch(2, str(tmp_path), str(history), epoch=0).best_epoch == 0  # a new run
