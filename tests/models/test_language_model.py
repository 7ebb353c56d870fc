"""Language-model and sequence-classifier builders."""

import keras
import numpy as np
import pytest

from keras_seq import models


def _lm(kind):
    if kind == "transformer":
        return models.language_model(10, num_layers=1, units=16, num_heads=2,
                                     intermediate_dim=32, dropout=0.0)
    return models.language_model(10, kind="rnn", num_layers=2, units=16, cell="peephole",
                                 dropout=0.0)


def _classifier(kind):
    if kind == "transformer":
        return models.sequence_classifier(10, 2, kind="transformer", units=8, num_heads=2,
                                          intermediate_dim=16, dropout=0.0)
    return models.sequence_classifier(10, 2, units=8, cell="coupled", dropout=0.0)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["transformer", "rnn"])
def test_language_model_loss_falls_on_a_counting_sequence(kind):
    keras.utils.set_random_seed(0)
    model = _lm(kind)
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0))
    # Sequences 4, 5, ..., 9, 4, 5, ... from random offsets: each next token is determined.
    offsets = np.arange(16)[:, None] + np.arange(7)[None, :]
    tokens = (4 + offsets % 6).astype("int32")
    loss = model.fit(tokens[:, :-1], tokens[:, 1:], epochs=10, batch_size=4, verbose=0).history["loss"]
    assert loss[-1] < 0.7 * loss[0]


def test_language_model_is_causal(rng):
    model = _lm("transformer")
    tokens = rng.integers(4, 10, size=(2, 6)).astype("int32")
    changed = tokens.copy()
    changed[:, 4:] = 4 + (changed[:, 4:] - 3) % 6
    # Positions before the change may not see it.
    np.testing.assert_allclose(model(changed)[:, :4], model(tokens)[:, :4], atol=1e-6)
    assert not np.allclose(model(changed)[:, 4:], model(tokens)[:, 4:])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_classifier_learns_which_half_of_the_vocabulary_dominates(kind, rng):
    keras.utils.set_random_seed(0)
    model = _classifier(kind)
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    labels = rng.integers(0, 2, size=64)
    tokens = np.where(labels[:, None] == 1, rng.integers(7, 10, (64, 6)),
                      rng.integers(4, 7, (64, 6))).astype("int32")
    tokens[::2, 4:] = 0  # padded rows
    loss = model.fit(tokens, labels, epochs=10, verbose=0).history["loss"]
    assert loss[-1] < 0.5 * loss[0]


@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_classifier_ignores_padding(kind, rng):
    model = _classifier(kind)
    tokens = rng.integers(4, 10, size=(3, 5)).astype("int32")
    padded = np.pad(tokens, ((0, 0), (0, 4)))
    np.testing.assert_allclose(model(padded), model(tokens), atol=1e-5)


@pytest.mark.parametrize(
    "build",
    [lambda: _lm("transformer"), lambda: _lm("rnn"), lambda: _classifier("rnn"),
     lambda: _classifier("transformer")],
    ids=["lm_transformer", "lm_rnn", "classifier_rnn", "classifier_transformer"],
)
def test_keras_file_round_trip_reproduces_outputs(build, rng, tmp_path):
    model = build()
    tokens = rng.integers(4, 10, size=(2, 5)).astype("int32")
    tokens[1, 3:] = 0
    model.save(tmp_path / "m.keras")
    restored = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    np.testing.assert_allclose(restored(tokens), model(tokens), atol=1e-6)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: models.language_model(10, kind="cnn"), "language_model: invalid value for argument `kind`"),
        (lambda: models.language_model(10, units=10, num_heads=3), "divide"),
        (lambda: models.sequence_classifier(10, 0), "sequence_classifier: invalid value for argument `num_classes`"),
        (lambda: models.sequence_classifier(10, 2, cell="rnn"), "sequence_classifier: invalid value for argument `cell`"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(call, message):
    with pytest.raises(ValueError, match=message):
        call()
