"""`monotonic_attention` against NumPy transcriptions of Raffel et al. (2017).

The soft reference is the expected alignment written as the paper's sum,
α_ij = p_ij Σ_{k≤j} α_{i−1,k} Π_{l=k}^{j−1} (1 − p_il), with explicit loops;
the hard reference scans the memory forward from the previous position and
stops at the first p > 0.5, as the paper's decoding does.
"""

import numpy as np
import pytest

from keras_seq.layers import monotonic_attention


def _expected_alignment(p, previous):
    p, previous = p.astype("float64"), previous.astype("float64")
    batch, length = p.shape
    alignment = np.zeros_like(p)
    for b in range(batch):
        for j in range(length):
            total = 0.0
            for k in range(j + 1):
                total += previous[b, k] * np.prod(1.0 - p[b, k:j])
            alignment[b, j] = p[b, j] * total
    return alignment


def _hard_alignment(p, previous):
    alignment = np.zeros_like(p)
    for b in range(p.shape[0]):
        if not previous[b].any():
            continue  # read past the end: nothing to attend to
        start = int(np.argmax(previous[b]))
        for j in range(start, p.shape[1]):
            if p[b, j] > 0.5:
                alignment[b, j] = 1.0
                break
    return alignment


def _soft_inputs(rng, batch=3, length=12):
    p = rng.uniform(0.05, 0.95, (batch, length)).astype("float32")
    previous = rng.uniform(0.0, 1.0, (batch, length)).astype("float32")
    previous /= previous.sum(axis=1, keepdims=True) * 1.25  # rows sum to 0.8
    return p, previous


@pytest.mark.parametrize("mode", ["recursive", "parallel"])
def test_the_expected_alignment_is_the_papers_sum(mode, rng):
    p, previous = _soft_inputs(rng)
    got = np.asarray(monotonic_attention(p, previous, mode))
    np.testing.assert_allclose(got, _expected_alignment(p, previous), atol=1e-6)
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
    expected = _hard_alignment(p, previous)
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
    hard = _hard_alignment(p, previous)
    assert hard[0, 6] == 1.0 and 0 < hard.sum() < 8  # some rows stop, some read past the end
    for mode in ("hard", "recursive", "parallel"):
        np.testing.assert_allclose(np.asarray(monotonic_attention(p, previous, mode)), hard,
                                   atol=1e-7, err_msg=mode)


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="monotonic_attention: invalid value for argument `mode`"):
        monotonic_attention(np.ones((1, 2), "float32"), np.ones((1, 2), "float32"), "soft")
