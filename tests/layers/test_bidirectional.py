"""`keras_seq.layers.Bidirectional`: Keras' wrapper that keeps the input mask.

Keras 3.16 sets ``supports_masking = False`` in `keras.layers.Bidirectional`'s
constructor, which drops the mask after it; the tests emulate that here (and
pass against keras-nightly 3.16 as they are). The reference: a masked mean
over time computed in NumPy from the wrapper's own sequence output.
"""

import keras
import numpy as np
import pytest

from keras_seq import layers, models

LENGTHS = [5, 2, 4]


@pytest.fixture
def keras_316_wrapper(monkeypatch):
    """Keras' wrapper as Keras 3.16 builds it: no mask past it."""
    original = keras.layers.Bidirectional.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.supports_masking = False

    monkeypatch.setattr(keras.layers.Bidirectional, "__init__", init)


def _ids():
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 10, size=(len(LENGTHS), max(LENGTHS))).astype("int32")
    return ids * (np.arange(max(LENGTHS))[None] < np.array(LENGTHS)[:, None])


def _pooled_and_sequence(wrapper):
    keras.utils.set_random_seed(1)
    ids = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(10, 4, mask_zero=True)(ids)
    h = wrapper(layers.GRU(3, return_sequences=True))(x)
    model = keras.Model(ids, [keras.layers.GlobalAveragePooling1D()(h), h])
    pooled, sequence = model.predict(_ids(), verbose=0)
    return pooled, sequence


def _masked_mean(sequence):
    valid = np.arange(sequence.shape[1])[None, :, None] < np.array(LENGTHS)[:, None, None]
    return (sequence * valid).sum(1) / valid.sum(1)


def test_the_mask_reaches_the_layer_after_the_wrapper(keras_316_wrapper):
    pooled, sequence = _pooled_and_sequence(layers.Bidirectional)
    np.testing.assert_allclose(pooled, _masked_mean(sequence), atol=1e-6)
    # Keras' own wrapper, as 3.16 builds it, lets the padding into the mean.
    pooled, sequence = _pooled_and_sequence(keras.layers.Bidirectional)
    assert not np.allclose(pooled, _masked_mean(sequence), atol=1e-3)


def test_same_outputs_config_and_weights_as_keras_and_a_keras_file(tmp_path):
    keras.utils.set_random_seed(2)
    x = np.random.default_rng(3).normal(size=(2, 6, 3)).astype("float32")
    ours = layers.Bidirectional(layers.PeepholeLSTM(4, return_sequences=True, name="lstm"),
                                merge_mode="sum", name="both")
    theirs = keras.layers.Bidirectional(layers.PeepholeLSTM(4, return_sequences=True,
                                                            name="lstm"),
                                        merge_mode="sum", name="both")
    ours(x), theirs(x)
    theirs.set_weights(ours.get_weights())
    np.testing.assert_allclose(ours(x), theirs(x), atol=1e-6)
    assert ours.get_config() == theirs.get_config()
    inputs = keras.Input((None, 3))
    model = keras.Model(inputs, ours(inputs))
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    assert type(loaded.layers[1]) is layers.Bidirectional
    np.testing.assert_allclose(loaded(x), model(x), atol=1e-6)


def test_the_builders_encode_with_it(keras_316_wrapper):
    for model in (models.rnn_seq2seq(12, 12, units=4, embedding_dim=3),
                  models.sequence_classifier(12, 3, units=4)):
        wrappers = [layer for layer in model._flatten_layers()
                    if isinstance(layer, keras.layers.Bidirectional)]
        assert wrappers and all(type(w) is layers.Bidirectional and w.supports_masking
                                for w in wrappers), model.name
