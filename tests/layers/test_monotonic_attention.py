"""`monotonic_attention` against NumPy transcriptions of Raffel et al. (2017).

The soft reference is the expected alignment written as the paper's sum,
α_ij = p_ij Σ_{k≤j} α_{i−1,k} Π_{l=k}^{j−1} (1 − p_il), with explicit loops;
the hard reference scans the memory forward from the previous position and
stops at the first p > 0.5, as the paper's decoding does.
"""

import numpy as np
import pytest
from monotonic_reference import expected_alignment, hard_alignment

from keras_seq.layers import monotonic_attention


def _soft_inputs(rng, batch=3, length=12):
    p = rng.uniform(0.05, 0.95, (batch, length)).astype("float32")
    previous = rng.uniform(0.0, 1.0, (batch, length)).astype("float32")
    previous /= previous.sum(axis=1, keepdims=True) * 1.25  # rows sum to 0.8
    return p, previous


@pytest.mark.parametrize("mode", ["recursive", "parallel"])
def test_the_expected_alignment_is_the_papers_sum(mode, rng):
    p, previous = _soft_inputs(rng)
    got = np.asarray(monotonic_attention(p, previous, mode))
    np.testing.assert_allclose(got, expected_alignment(p, previous), atol=1e-6)
    # Nothing is created: the mass that stays is at most what came in.
    assert np.all(got.sum(axis=1) <= previous.sum(axis=1) + 1e-6)


@pytest.mark.parametrize("length", [30, 200])
def test_the_parallel_form_equals_the_recursive_one(length, rng):
    # At 200 positions the products of (1 - p) underflow float32 (the reason
    # Raffel et al.'s closed form needs a clip): the forms still agree.
    p, previous = _soft_inputs(rng, batch=4, length=length)
    recursive = np.asarray(monotonic_attention(p, previous, "recursive"))
    parallel = np.asarray(monotonic_attention(p, previous, "parallel"))
    np.testing.assert_allclose(parallel, recursive, atol=1e-6)
    assert recursive.max() > 0.01


def test_hard_mode_stops_at_the_first_choice_from_the_previous_position(rng):
    p = rng.uniform(0.0, 1.0, (6, 9)).astype("float32")
    previous = np.zeros((6, 9), "float32")
    previous[np.arange(6), [0, 2, 4, 7, 8, 0]] = 1.0
    p[1, 0] = 0.9  # chosen before the previous position: ignored (TFA would wipe the row)
    p[3, 7:] = 0.2  # nothing chosen from position 7 on: zeros
    previous[5] = 0.0  # already past the end: zeros
    got = np.asarray(monotonic_attention(p, previous, "hard"))
    expected = hard_alignment(p, previous)
    np.testing.assert_array_equal(got, expected)
    assert not got[3].any() and not got[5].any() and got[1].sum() == 1.0


def test_on_zero_one_inputs_the_expected_alignment_is_the_hard_one(rng):
    p = (rng.uniform(0.0, 1.0, (8, 10)) > 0.6).astype("float32")
    previous = np.zeros((8, 10), "float32")
    previous[np.arange(8), rng.integers(0, 10, 8)] = 1.0
    p[0, :] = 0.0
    p[0, [1, 6]] = 1.0  # a choice before the previous position, and one after it
    previous[0] = 0.0
    previous[0, 3] = 1.0
    hard = hard_alignment(p, previous)
    assert hard[0, 6] == 1.0 and 0 < hard.sum() < 8  # some rows stop, some read past the end
    for mode in ("hard", "recursive", "parallel"):
        np.testing.assert_allclose(np.asarray(monotonic_attention(p, previous, mode)), hard,
                                   atol=1e-7, err_msg=mode)


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="monotonic_attention: invalid value for argument `mode`"):
        monotonic_attention(np.ones((1, 2), "float32"), np.ones((1, 2), "float32"), "soft")


# --- the layers: energy of Bahdanau or Luong, then the paper's alignment ---


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _bahdanau_energy(weights, query, memory):
    w_q, w_k, v, bias = weights
    return np.tanh((query @ w_q)[:, None, :] + memory @ w_k) @ v + bias


def _luong_energy(weights, query, memory):
    w_a, bias = weights
    return np.einsum("bd,bkd->bk", query, memory @ w_a) + bias


@pytest.mark.parametrize("layer_class, energy", [
    ("BahdanauMonotonicAttention", _bahdanau_energy),
    ("LuongMonotonicAttention", _luong_energy),
])
@pytest.mark.parametrize("mode", ["parallel", "recursive", "hard"])
def test_the_layers_align_like_the_paper_from_their_energy(layer_class, energy, mode, rng):
    from keras_seq import layers

    query_width = 6 if layer_class.startswith("Bahdanau") else 4
    layer = (layers.BahdanauMonotonicAttention(8, score_bias_init=-0.5, mode=mode)
             if layer_class.startswith("Bahdanau")
             else layers.LuongMonotonicAttention(score_bias_init=-0.5, mode=mode))
    memory = rng.normal(size=(3, 7, 4)).astype("float32")
    query = rng.normal(size=(3, query_width)).astype("float32")
    layer.build((None, query_width), (None, None, 4))
    weights = [rng.normal(size=w.shape).astype("float32") * 0.5 for w in layer.get_weights()]
    weights[-1] = np.float32(-0.5)  # the score bias keeps its initial value
    layer.set_weights(weights)
    mask = np.ones((3, 7), bool)
    mask[1, 5:] = False  # padding: never stopped at
    previous = np.zeros((3, 7), "float32")
    previous[:, 0] = 1.0  # `initial_alignments`
    np.testing.assert_array_equal(np.asarray(layer.initial_alignments(memory)), previous)
    previous[2] = [0.1, 0.3, 0.2, 0.1, 0.1, 0.0, 0.0]  # a later, soft step
    if mode == "hard":
        previous[2] = [0, 0, 1, 0, 0, 0, 0]
    context, alignments = layer(query, memory, previous, value_mask=mask)

    p = np.where(mask, _sigmoid(energy([w.astype("float64") for w in weights], query, memory)),
                 0.0)
    expected = hard_alignment(p, previous) if mode == "hard" else expected_alignment(p, previous)
    np.testing.assert_allclose(np.asarray(alignments), expected, atol=1e-5)
    assert not np.asarray(alignments)[1, 5:].any()
    np.testing.assert_allclose(np.asarray(context), np.einsum("bk,bkd->bd", expected, memory),
                               atol=1e-5)
    assert weights and [w.name for w in layer.weights][-1] == "score_bias"


def test_the_noise_is_for_training_and_the_config_round_trips(rng):
    import keras

    from keras_seq import layers

    layer = layers.BahdanauMonotonicAttention(8, sigmoid_noise=2.0, score_bias_init=-4.0,
                                              mode="recursive", seed=3)
    memory = rng.normal(size=(2, 6, 4)).astype("float32")
    query = rng.normal(size=(2, 5)).astype("float32")
    layer.build((None, 5), (None, None, 4))
    start = layer.initial_alignments(memory)
    assert float(layer.get_weights()[-1]) == -4.0
    quiet = [np.asarray(layer(query, memory, start)[1]) for _ in range(2)]
    noisy = np.asarray(layer(query, memory, start, training=True)[1])
    np.testing.assert_array_equal(quiet[0], quiet[1])
    assert np.abs(noisy - quiet[0]).max() > 1e-3
    # A call may decode in hard mode whatever the layer trains with.
    hard = np.asarray(layer(query, memory, start, mode="hard")[1])
    assert set(np.unique(hard)) <= {0.0, 1.0}

    clone = keras.layers.deserialize(keras.layers.serialize(layer))
    assert isinstance(clone, layers.BahdanauMonotonicAttention)
    assert (clone.sigmoid_noise, clone.score_bias_init, clone.mode) == (2.0, -4.0, "recursive")


def test_the_layers_refuse_a_sequence_of_queries_and_a_bad_mode(rng):
    from keras_seq import layers

    layer = layers.LuongMonotonicAttention()
    memory = rng.normal(size=(2, 6, 4)).astype("float32")
    with pytest.raises(ValueError, match="LuongMonotonicAttention.*`query`.*one decoder step"):
        layer(memory, memory, np.zeros((2, 6), "float32"))
    with pytest.raises(ValueError, match="`mode`"):
        layers.BahdanauMonotonicAttention(4, mode="soft")
