"""The DCNN (Kalchbrenner et al. 2014) against a NumPy forward pass of the paper's
stages with the model's weights; the wide convolution's mask; training."""

import math
from fractions import Fraction

import keras
import numpy as np
import pytest

from keras_seq import models
from keras_seq.layers import WideConvolution1D


def _wide_convolution(x, kernel, bias):
    """x (T, n_in, d) -> (T + m - 1, n_out, d): each row convolved on its own."""
    m = kernel.shape[0]
    padded = np.concatenate([np.zeros((m - 1, *x.shape[1:])), x, np.zeros((m - 1, *x.shape[1:]))])
    out = np.zeros((x.shape[0] + m - 1, kernel.shape[2], x.shape[2]))
    for t in range(out.shape[0]):
        for w in range(m):
            # Σ_k x̃[t + w, k, r] · kernel[w, k, j, r]
            out[t] += np.einsum("kr,kjr->jr", padded[t + w], kernel[w])
    return out + bias


def _numpy_dcnn(model, ids, k_top, folding, k_max_reference):
    """Logits of one unpadded sentence, stage by stage as in the paper."""
    x = model.backbone.get_layer("embedding").get_weights()[0][ids][:, None, :]  # (s, 1, d)
    num_layers = len(folding)
    for layer, fold in enumerate(folding, start=1):
        kernel, bias = model.backbone.get_layer(f"wide_convolution_{layer}").get_weights()
        x = _wide_convolution(x, kernel, bias)
        if fold:
            x = x[..., 0::2] + x[..., 1::2]
        s, maps, rows = x.shape
        k = max(k_top, math.ceil(Fraction((num_layers - layer) * s, num_layers)))
        pooled = k_max_reference(x.reshape(1, s, -1), None, k)[0].reshape(k, maps, rows)
        x = np.tanh(pooled[: min(k, s)])  # the steps after min(k, s) are padding
    top = np.zeros((k_top, *x.shape[1:]))
    top[: len(x)] = x
    W, b = model.output_layer.get_weights()
    return top.reshape(-1) @ W + b


def test_dcnn_matches_numpy_forward_and_padded_batch_equals_each_sentence_alone(
    rng, k_max_reference
):
    keras.utils.set_random_seed(0)
    folding = (True, False, True)
    model = models.dcnn_classifier(
        15, 3, embedding_dim=8, filters=(2, 3, 2), kernel_sizes=(3, 2, 4), k_top=3,
        folding=folding,
    )
    for weight in model.weights:  # non-zero biases everywhere
        weight.assign(rng.normal(0.0, 0.5, weight.shape).astype("float32"))
    lengths = [12, 7, 2, 1]
    ids = rng.integers(1, 15, size=(4, 12)).astype("int32") * (
        np.arange(12)[None] < np.array(lengths)[:, None]
    )
    logits = model(ids, training=False)
    for b, s in enumerate(lengths):
        expected = _numpy_dcnn(model, ids[b, :s], 3, folding, k_max_reference)
        np.testing.assert_allclose(logits[b], expected, atol=1e-5)


def test_wide_convolution_mask_marks_windows_that_touch_a_valid_step(rng):
    conv = WideConvolution1D(2, 3)
    x = rng.normal(size=(3, 6, 4)).astype("float32")
    mask = rng.random((3, 6)) < 0.5
    mask[0] = [False, True, False, False, False, True]  # holes, not only right padding
    got = np.asarray(conv.compute_mask(x, mask))
    m = 3
    for b in range(3):
        for t in range(6 + m - 1):  # output step t covers input steps t - m + 1 .. t
            window = [u for u in range(t - m + 1, t + 1) if 0 <= u < 6]
            assert got[b, t] == any(mask[b, u] for u in window), (b, t)
    # Masked inputs count as zeros.
    conv.build(x.shape)
    kernel, bias = [rng.normal(size=w.shape).astype("float32") for w in conv.get_weights()]
    conv.set_weights([kernel, bias])
    expected = [_wide_convolution((x[b] * mask[b][:, None])[:, None, :], kernel, bias)
                for b in range(3)]
    np.testing.assert_allclose(conv(x, mask=mask), np.stack(expected), atol=1e-5)


def test_dcnn_round_trips_through_keras_file(tmp_path, rng):
    model = models.dcnn_classifier(10, 2, embedding_dim=4, filters=(2, 2), kernel_sizes=(3, 2))
    ids = rng.integers(0, 10, size=(3, 7)).astype("int32")
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    np.testing.assert_array_equal(loaded(ids), model(ids))


@pytest.mark.parametrize("kwargs, error, message", [
    ({"embedding_dim": 6, "folding": (True, True)}, ValueError,
     "argument `embedding_dim`: expected a multiple of 4"),
    ({"kernel_sizes": (3,)}, ValueError, "argument `kernel_sizes`: expected 2 widths"),
    ({"filters": (2, 0)}, ValueError, r"argument `filters\[1\]`"),
    ({"filters": 4}, TypeError, "argument `filters`"),
    ({"folding": (True,)}, ValueError, "argument `folding`: expected 2 bools"),
    ({"k_top": 0}, ValueError, "argument `k_top`"),
    ({"dropout": 1.0}, ValueError, "argument `dropout`"),
])
def test_dcnn_rejects_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match="dcnn_classifier: invalid .*" + message):
        models.dcnn_classifier(10, 2, **{"embedding_dim": 8, **kwargs})


@pytest.mark.slow
def test_dcnn_training_lowers_the_loss(rng):
    # Class 1 iff token 3 occurs: k-max pooling must find it wherever it is.
    keras.utils.set_random_seed(1)
    lengths = rng.integers(3, 11, size=256)
    ids = rng.integers(4, 12, size=(256, 10)) * (np.arange(10)[None] < lengths[:, None])
    labels = rng.integers(0, 2, size=256)
    for row, label, s in zip(ids, labels, lengths):
        if label:
            row[rng.integers(0, s)] = 3
    model = models.dcnn_classifier(12, 2, embedding_dim=8, filters=(4, 6), kernel_sizes=(3, 3),
                                   dropout=0.1)
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(ids.astype("int32"), labels, epochs=5, batch_size=32, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.5 * losses[0], losses
