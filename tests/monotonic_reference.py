"""NumPy transcriptions of Raffel et al. (2017), shared by the tests of
`monotonic_attention`, `AttentionWrapper` and the monotonic decoder.

The soft reference is the expected alignment written as the paper's sum,
α_ij = p_ij Σ_{k≤j} α_{i−1,k} Π_{l=k}^{j−1} (1 − p_il), with explicit loops;
the hard reference scans the memory forward from the previous position and
stops at the first p > 0.5, as the paper's decoding does.
"""

import numpy as np


def expected_alignment(p, previous):
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


def hard_alignment(p, previous):
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
