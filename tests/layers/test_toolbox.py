"""Highway, KMaxPooling, DynamicKMaxPooling and Folding against NumPy versions of
their papers' equations; masks, padding, saving and bad arguments."""

import math
from fractions import Fraction

import keras
import numpy as np
import pytest

from keras_seq import layers


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _lengths_mask(lengths, steps):
    return np.arange(steps)[None] < np.asarray(lengths)[:, None]


# --- Highway ------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(4, 6), (2, 5, 6)])
def test_highway_matches_numpy_equations(shape, rng):
    x = rng.normal(size=shape).astype("float32")
    layer = layers.Highway(activation="tanh")
    layer.build(shape)
    weights = [rng.normal(0.0, 0.5, w.shape).astype("float32") for w in layer.get_weights()]
    layer.set_weights(weights)
    W, b, W_T, b_T = weights
    H = np.tanh(x @ W + b)
    t = _sigmoid(x @ W_T + b_T)
    np.testing.assert_allclose(layer(x), t * H + (1 - t) * x, atol=1e-6)


def test_highway_weight_layout_and_transform_bias_start():
    layer = layers.Highway(transform_gate_bias=-2.5)
    layer.build((None, 7, 3))
    assert [(w.path.split("/")[-1], tuple(w.shape)) for w in layer.weights] == [
        ("kernel", (3, 3)), ("bias", (3,)), ("transform_kernel", (3, 3)), ("transform_bias", (3,)),
    ]
    np.testing.assert_array_equal(layer.transform_bias, np.full(3, -2.5, "float32"))


def test_highway_passes_the_mask_through():
    tokens = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(9, 4, mask_zero=True)(tokens)
    model = keras.Model(tokens, layers.Highway()(x)._keras_mask)
    ids = np.array([[3, 1, 0, 0]])
    np.testing.assert_array_equal(model(ids), ids != 0)


# --- Folding ------------------------------------------------------------------------


def test_folding_sums_neighbouring_features(rng):
    x = rng.normal(size=(2, 3, 4, 6)).astype("float32")
    expected = x[..., 0::2] + x[..., 1::2]  # out[..., j] = x[..., 2j] + x[..., 2j+1]
    np.testing.assert_allclose(layers.Folding()(x), expected, atol=1e-6)


# --- k-max pooling --------------------------------------------------------------------


def test_k_max_pooling_matches_reference_with_ties_masks_and_short_rows(rng, k_max_reference):
    # Small integers: many ties, which the earlier step must win.
    x = rng.integers(-3, 4, size=(4, 9, 5)).astype("float32")
    mask = _lengths_mask([9, 6, 2, 0], 9)
    mask[1, 1] = False  # a hole inside a sequence
    pool = layers.KMaxPooling(4)
    np.testing.assert_array_equal(pool(x, mask=mask), k_max_reference(x, mask, 4))
    np.testing.assert_array_equal(pool(x), k_max_reference(x, None, 4))
    # Output mask: True at the first min(k, s) positions.
    s = mask.sum(1)
    np.testing.assert_array_equal(pool.compute_mask(x, mask), _lengths_mask(np.minimum(4, s), 4))


def test_k_max_pooling_keeps_time_order_and_the_earlier_of_equal_values():
    x = np.array([[3, 1, 3, 2, 3, 0]], "float32")[..., None]
    out = layers.KMaxPooling(2)(x)[0, :, 0]
    np.testing.assert_array_equal(out, [3, 3])  # steps 0 and 2, not 4
    out = layers.KMaxPooling(4)(x[:, ::-1])[0, :, 0]  # 0 3 2 3 1 3 -> steps 1, 2, 3, 5
    np.testing.assert_array_equal(out, [3, 2, 3, 3])


def test_k_max_pooling_of_a_sequence_shorter_than_k_pads_with_zeros(rng, k_max_reference):
    x = rng.normal(size=(2, 3, 2)).astype("float32")
    out = layers.KMaxPooling(5)(x)
    np.testing.assert_array_equal(out, k_max_reference(x, None, 5))
    np.testing.assert_array_equal(out[:, 3:], 0.0)


def test_k_max_pooling_pools_every_feature_axis(rng, k_max_reference):
    x = rng.normal(size=(2, 7, 3, 4)).astype("float32")
    mask = _lengths_mask([7, 4], 7)
    expected = k_max_reference(x.reshape(2, 7, 12), mask, 3).reshape(2, 3, 3, 4)
    np.testing.assert_array_equal(layers.KMaxPooling(3)(x, mask=mask), expected)


def test_k_max_pooling_gradient_reaches_exactly_the_chosen_steps(
    rng, k_max_reference, gradients
):
    x = rng.normal(size=(2, 6, 3)).astype("float32")
    mask = _lengths_mask([6, 4], 6)
    pool = layers.KMaxPooling(3)
    _, (grad,) = gradients(lambda x: keras.ops.sum(pool(x, mask=mask)), [x])
    # The chosen steps are the ones whose value appears in the reference output.
    chosen = np.zeros_like(grad)
    ref = k_max_reference(x, mask, 3)
    for b in range(2):
        for f in range(3):
            chosen[b, np.isin(x[b, :, f], ref[b, :, f]) & mask[b], f] = 1.0
    np.testing.assert_array_equal(grad, chosen)


def _paper_k(k_top, layer, L, s):
    return max(k_top, math.ceil(Fraction((L - layer) * s, L)))  # exact rational ceiling


def test_dynamic_k_is_the_papers_formula_in_exact_integers():
    # (L - l) * s / L in floats can land just above an integer: 2/3 * 3 = 2.0000000000000004.
    for L in (1, 2, 3, 5, 7):
        for layer in range(1, L + 1):
            pool = layers.DynamicKMaxPooling(2, layer, L)
            for s in (1, 2, 3, 6, 7, 21, 100, 999):
                expected = _paper_k(2, layer, L, s)
                assert pool.compute_output_shape((None, s, 4))[1] == expected, (layer, L, s)


def test_dynamic_k_max_pooling_uses_each_sequences_own_length(rng, k_max_reference):
    x = rng.normal(size=(4, 11, 3)).astype("float32")
    lengths = [11, 7, 3, 1]
    mask = _lengths_mask(lengths, 11)
    pool = layers.DynamicKMaxPooling(k_top=2, layer_index=2, num_layers=5)
    ks = [_paper_k(2, 2, 5, s) for s in lengths]  # 9, 6, 2, 2
    expected = k_max_reference(x, mask, ks)
    out = pool(x, mask=mask)
    assert out.shape[1] == _paper_k(2, 2, 5, 11)  # the formula with s = T
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(
        pool.compute_mask(x, mask), _lengths_mask(np.minimum(ks, lengths), out.shape[1])
    )
    np.testing.assert_array_equal(pool(x), k_max_reference(x, None, _paper_k(2, 2, 5, 11)))


# --- all four ---------------------------------------------------------------------


def _toolbox_model():
    tokens = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(13, 8, mask_zero=True)(tokens)
    x = layers.Highway(activation="tanh")(x)
    x = layers.Folding()(x)  # (B, T, 4)
    x = layers.DynamicKMaxPooling(3, 1, 3)(x)  # (B, max(3, ceil(2T/3)), 4)
    x = layers.KMaxPooling(4)(x)
    return keras.Model(tokens, [x, x._keras_mask])


def test_padded_batch_equals_each_sequence_alone(rng):
    keras.utils.set_random_seed(0)
    model = _toolbox_model()
    lengths = [9, 5, 2]
    # Distinct tokens in a row: a repeated token gives equal values, whose
    # k-max order then hangs on the last bit of batched arithmetic.
    ids = np.stack([rng.permutation(np.arange(1, 13))[:9] for _ in lengths]).astype("int32")
    ids *= _lengths_mask(lengths, 9)
    out, mask = model(ids)
    for b, s in enumerate(lengths):
        alone, alone_mask = model(ids[b : b + 1, :s])
        np.testing.assert_allclose(out[b : b + 1], alone, atol=1e-6)
        np.testing.assert_array_equal(mask[b : b + 1], alone_mask)


@pytest.mark.parametrize("make, error, message", [
    (lambda: layers.KMaxPooling(0), ValueError, "argument `k`: expected a positive integer"),
    (lambda: layers.KMaxPooling(True), TypeError, "argument `k`"),
    (lambda: layers.DynamicKMaxPooling(0, 1, 2), ValueError, "argument `k_top`"),
    (lambda: layers.DynamicKMaxPooling(2, 3, 2), ValueError,
     r"argument `layer_index`: expected an integer in \[1, 2\], received 3"),
    (lambda: layers.DynamicKMaxPooling(2, 1, 0), ValueError, "argument `num_layers`"),
    (lambda: layers.Highway(transform_gate_bias="-1"), TypeError, "`transform_gate_bias`"),
    (lambda: layers.Highway(activation=3), TypeError, "`activation`"),
])
def test_bad_arguments_name_the_layer_and_argument(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_bad_shapes_are_caught_at_build_naming_the_layer():
    with pytest.raises(ValueError, match="Folding 'fold': invalid shape for argument `inputs`"):
        layers.Folding(name="fold")(np.zeros((1, 2, 5), "float32"))
    with pytest.raises(ValueError, match="KMaxPooling 'pool': invalid shape for argument `inputs`"):
        layers.KMaxPooling(2, name="pool")(np.zeros((1, 5), "float32"))
    with pytest.raises(ValueError, match="KMaxPooling 'pool2': invalid shape for argument `mask`"):
        layers.KMaxPooling(2, name="pool2")(np.zeros((1, 5, 2), "float32"),
                                            mask=np.ones((1, 4), bool))
    with pytest.raises(ValueError, match="Highway 'hw': invalid shape for argument `inputs`"):
        layers.Highway(name="hw")(np.zeros((3,), "float32"))
