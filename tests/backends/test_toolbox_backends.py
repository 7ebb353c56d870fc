"""KMaxPooling and DynamicKMaxPooling on the running Keras backend, against the
NumPy reference: values, ties, masks, short rows and per-sequence k.

Backend-neutral: NumPy in, `keras.ops.convert_to_numpy` out, no TensorFlow
import, so the same tests check TensorFlow's TopK form and the `keras.ops`
form the other backends use (run with KERAS_BACKEND=jax or torch).
"""

import math
from fractions import Fraction

import keras
import numpy as np

from keras_seq import layers, models


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def _lengths_mask(lengths, steps):
    return np.arange(steps)[None] < np.asarray(lengths)[:, None]


def _paper_k(k_top, layer, num_layers, s):
    return max(k_top, math.ceil(Fraction((num_layers - layer) * s, num_layers)))


def test_k_max_pooling_matches_reference_with_ties_masks_and_short_rows(rng, k_max_reference):
    # Small integers: many ties, which the earlier step must win.
    x = rng.integers(-3, 4, size=(5, 9, 5)).astype("float32")
    mask = _lengths_mask([9, 6, 2, 0, 9], 9)
    mask[1, 1] = False  # a hole inside a sequence
    mask[4, ::2] = False  # every other step
    pool = layers.KMaxPooling(4)
    np.testing.assert_array_equal(_numpy(pool(x, mask=mask)), k_max_reference(x, mask, 4))
    np.testing.assert_array_equal(_numpy(pool(x)), k_max_reference(x, None, 4))
    # Output mask: True at the first min(k, s) positions.
    expected_mask = _lengths_mask(np.minimum(4, mask.sum(1)), 4)
    np.testing.assert_array_equal(_numpy(pool.compute_mask(x, mask)), expected_mask)


def test_k_max_pooling_keeps_time_order_and_the_earlier_of_equal_values():
    x = np.array([[3, 1, 3, 2, 3, 0]], "float32")[..., None]
    np.testing.assert_array_equal(_numpy(layers.KMaxPooling(2)(x))[0, :, 0], [3, 3])  # steps 0, 2
    reversed_x = np.ascontiguousarray(x[:, ::-1])  # 0 3 2 3 1 3 -> steps 1, 2, 3, 5
    np.testing.assert_array_equal(_numpy(layers.KMaxPooling(4)(reversed_x))[0, :, 0], [3, 2, 3, 3])
    constant = np.full((1, 6, 1), 7.0, "float32")  # all tied: the first k steps
    mask = np.array([[False, True, True, False, True, True]])
    np.testing.assert_array_equal(_numpy(layers.KMaxPooling(3)(constant, mask=mask)),
                                  np.full((1, 3, 1), 7.0, "float32"))


def test_k_max_pooling_never_chooses_a_masked_step_even_the_largest():
    x = np.array([[9, 1, 8, 2, 7]], "float32")[..., None]
    mask = np.array([[False, True, False, True, True]])
    out = _numpy(layers.KMaxPooling(2)(x, mask=mask))[0, :, 0]
    np.testing.assert_array_equal(out, [2, 7])


def test_k_max_pooling_of_a_sequence_shorter_than_k_pads_with_zeros(rng, k_max_reference):
    x = rng.normal(size=(2, 3, 2)).astype("float32")
    out = _numpy(layers.KMaxPooling(5)(x))
    np.testing.assert_array_equal(out, k_max_reference(x, None, 5))
    np.testing.assert_array_equal(out[:, 3:], 0.0)


def test_k_max_pooling_pools_every_feature_axis(rng, k_max_reference):
    x = rng.integers(-2, 3, size=(2, 7, 3, 4)).astype("float32")
    mask = _lengths_mask([7, 4], 7)
    expected = k_max_reference(x.reshape(2, 7, 12), mask, 3).reshape(2, 3, 3, 4)
    np.testing.assert_array_equal(_numpy(layers.KMaxPooling(3)(x, mask=mask)), expected)


def test_dynamic_k_max_pooling_uses_each_sequences_own_length(rng, k_max_reference):
    x = rng.integers(-3, 4, size=(4, 11, 3)).astype("float32")
    lengths = [11, 7, 3, 1]
    mask = _lengths_mask(lengths, 11)
    pool = layers.DynamicKMaxPooling(k_top=2, layer_index=2, num_layers=5)
    ks = [_paper_k(2, 2, 5, s) for s in lengths]  # 9, 6, 2, 2
    out = _numpy(pool(x, mask=mask))
    assert out.shape[1] == _paper_k(2, 2, 5, 11)  # the formula with s = T
    np.testing.assert_array_equal(out, k_max_reference(x, mask, ks))
    np.testing.assert_array_equal(
        _numpy(pool.compute_mask(x, mask)), _lengths_mask(np.minimum(ks, lengths), out.shape[1])
    )
    np.testing.assert_array_equal(
        _numpy(pool(x)), k_max_reference(x, None, _paper_k(2, 2, 5, 11))
    )


def test_compiled_model_matches_reference_and_carries_the_mask(rng, k_max_reference):
    # `predict` compiles the model (jit on JAX): the pooling must trace.
    inputs = keras.Input((None, 3))
    masked = keras.layers.Masking(0.0)(inputs)
    pooled = layers.DynamicKMaxPooling(k_top=2, layer_index=1, num_layers=2)(masked)
    model = keras.Model(inputs, [pooled, pooled._keras_mask])
    lengths = [8, 5, 1]
    mask = _lengths_mask(lengths, 8)
    x = rng.integers(1, 4, size=(3, 8, 3)).astype("float32") * mask[..., None]
    out, out_mask = model.predict(x, verbose=0)
    ks = [_paper_k(2, 1, 2, s) for s in lengths]  # 4, 3, 2
    np.testing.assert_array_equal(out, k_max_reference(x, mask, ks))
    np.testing.assert_array_equal(out_mask, _lengths_mask(np.minimum(ks, lengths), 4))


def test_dcnn_trains_a_step_and_round_trips_through_a_keras_file(rng, tmp_path):
    model = models.dcnn_classifier(30, 3, embedding_dim=8, filters=(2, 3), kernel_sizes=(3, 2))
    ids = rng.integers(1, 30, size=(4, 9)).astype("int32") * _lengths_mask([9, 6, 3, 2], 9)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(ids, np.array([0, 1, 2, 1]), epochs=1, batch_size=2, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    model.save(tmp_path / "dcnn.keras")
    loaded = keras.saving.load_model(tmp_path / "dcnn.keras", safe_mode=True)
    np.testing.assert_allclose(
        loaded.predict(ids, verbose=0), model.predict(ids, verbose=0), rtol=1e-6, atol=1e-6
    )
