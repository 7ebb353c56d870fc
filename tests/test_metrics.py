"""`keras_seq.metrics.Perplexity` against the formula exp(Σ w·(−log p) / Σ w) in NumPy."""

import keras
import numpy as np
import pytest

from keras_seq.metrics import Perplexity


def _log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _perplexity(y_true, logits, weights):
    nll = -np.take_along_axis(_log_softmax(logits.astype(np.float64)), y_true[..., None], -1)[..., 0]
    return np.exp((weights * nll).sum() / weights.sum())


@pytest.fixture
def batches():
    rng = np.random.default_rng(0)
    return [
        (rng.integers(0, 7, size=(3, 5)), rng.normal(size=(3, 5, 7)) * 3, rng.uniform(size=(3, 5)))
        for _ in range(2)
    ]


def test_perplexity_is_exp_of_the_weighted_mean_cross_entropy_over_all_updates(batches):
    metric = Perplexity(mask_token_id=0)
    for y, logits, w in batches:
        metric.update_state(y, logits, sample_weight=w)
    y, logits, w = (np.concatenate(parts) for parts in zip(*batches))
    expected = _perplexity(y, logits, w * (y != 0))
    np.testing.assert_allclose(float(metric.result()), expected, rtol=1e-5)
    metric.reset_state()
    assert float(metric.result()) == 1.0  # nothing seen: zero loss, not NaN


def test_probabilities_and_logits_give_the_same_perplexity(batches):
    y, logits, _ = batches[0]
    probabilities = np.exp(_log_softmax(logits))
    from_probabilities = Perplexity(from_logits=False)
    from_probabilities.update_state(y, probabilities)
    from_logits = Perplexity()
    from_logits.update_state(y, logits)
    expected = _perplexity(y, logits, np.ones(y.shape))
    np.testing.assert_allclose(float(from_logits.result()), expected, rtol=1e-5)
    np.testing.assert_allclose(float(from_probabilities.result()), expected, rtol=1e-4)


def test_per_sequence_weights_and_the_keras_mask_of_the_predictions_are_honoured():
    rng = np.random.default_rng(1)
    ids = np.array([[3, 4, 5, 0, 0], [6, 2, 0, 0, 0]])
    y = rng.integers(1, 6, size=ids.shape)
    embedding = keras.layers.Embedding(8, 4, mask_zero=True)
    dense = keras.layers.Dense(6)
    logits = dense(embedding(ids))  # carries the Keras mask ids != 0
    metric = Perplexity()
    metric.update_state(y, logits, sample_weight=np.array([1.0, 3.0]))
    weights = np.array([[1.0], [3.0]]) * (ids != 0)
    expected = _perplexity(y, keras.ops.convert_to_numpy(logits), weights)
    np.testing.assert_allclose(float(metric.result()), expected, rtol=1e-5)


def test_masked_positions_may_hold_non_finite_logits():
    logits = np.zeros((1, 2, 3), np.float32)
    logits[0, 1] = np.nan
    metric = Perplexity(mask_token_id=0)
    metric.update_state(np.array([[1, 0]]), logits)
    np.testing.assert_allclose(float(metric.result()), 3.0, rtol=1e-6)


def test_perplexity_round_trips_through_its_registered_config():
    metric = Perplexity(from_logits=False, mask_token_id=2, name="ppl")
    restored = keras.metrics.deserialize(keras.metrics.serialize(metric))
    assert type(restored) is Perplexity
    assert restored.get_config() == metric.get_config()


def test_bad_arguments_name_the_metric():
    with pytest.raises(TypeError, match="invalid type for argument `from_logits`"):
        Perplexity(from_logits="yes")
    with pytest.raises(TypeError, match="invalid type for argument `mask_token_id`"):
        Perplexity(mask_token_id="0")
    with pytest.raises(ValueError, match="invalid value for argument `mask_token_id`"):
        Perplexity(mask_token_id=1.5)
    with pytest.raises(ValueError, match="invalid shape for argument `y_pred`"):
        Perplexity().update_state(np.zeros((2, 3), "int32"), np.zeros((2, 3)))
