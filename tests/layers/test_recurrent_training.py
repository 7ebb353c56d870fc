"""A small model with each recurrent layer learns a toy memory task."""

import keras
import numpy as np
import pytest

from keras_seq import layers

pytestmark = pytest.mark.slow

VOCAB, STEPS = 6, 7


def _copy_first_token_data(rng, n):
    """Tokens 1..VOCAB-1, random right padding; the target is the first token."""
    tokens = rng.integers(1, VOCAB, size=(n, STEPS))
    lengths = rng.integers(3, STEPS + 1, size=n)
    tokens[np.arange(STEPS)[None, :] >= lengths[:, None]] = 0
    return tokens.astype("int32"), tokens[:, 0].astype("int32")


@pytest.mark.parametrize("cls, kwargs", [
    (layers.PeepholeLSTM, {}),
    (layers.CoupledGateLSTM, {"use_peepholes": True}),
    (layers.GRU, {}),
])
def test_copy_first_token_to_the_end_loss_falls(cls, kwargs, rng):
    keras.utils.set_random_seed(0)
    x, y = _copy_first_token_data(rng, 512)
    model = keras.Sequential([
        keras.Input((None,), dtype="int32"),
        keras.layers.Embedding(VOCAB, 8, mask_zero=True),
        cls(24, **kwargs),
        keras.layers.Dense(VOCAB),
    ])
    model.compile(
        optimizer=keras.optimizers.Adam(0.02),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    before = model.evaluate(x, y, verbose=0, return_dict=True)
    model.fit(x, y, batch_size=64, epochs=6, verbose=0)
    after = model.evaluate(x, y, verbose=0, return_dict=True)
    # Untrained: about log(6) ≈ 1.8 nats; guessing among the 5 tokens is 20% accurate.
    assert after["loss"] < 0.2 * before["loss"], (before, after)
    assert after["accuracy"] > 0.9, after
