"""The algorithmic tasks of the Neural Turing Machine (Graves et al. 2014, section 4).

Seeded `tf.data` generators of random bit vectors with delimiter channels:
`copy_task`, `repeat_copy_task`, `associative_recall_task` and
`priority_sort_task`, scored with `bit_errors`.
"""

from __future__ import annotations

import itertools

import numpy as np
import tensorflow as tf

from keras_seq._validation import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    invalid_value,
    shape_error,
)

__all__ = [
    "copy_task",
    "repeat_copy_task",
    "associative_recall_task",
    "priority_sort_task",
    "bit_errors",
]

# Every task's inputs have `bits + 2` channels: the `bits` data channels, the
# delimiter flag (channel `bits`) and the task's second control channel
# (channel `bits + 1`: the repeat count, the query delimiter or the priority).
# Batch `i` of a dataset is drawn from `np.random.default_rng([seed, i])` alone.

_LENGTH_DRAWS = ("batch", "example")


def _random_bits(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(0, 2, size=shape).astype(np.float32)


def _answer_weights(total: int, answer_start: int) -> np.ndarray:
    weights = np.zeros(total, np.float32)
    weights[answer_start:] = 1.0
    return weights


def _copy_example(rng, bits, length):
    vectors = _random_bits(rng, (length, bits))
    total = 2 * length + 1
    inputs = np.zeros((total, bits + 2), np.float32)
    inputs[:length, :bits] = vectors
    inputs[length, bits] = 1.0
    targets = np.zeros((total, bits), np.float32)
    targets[length + 1 :] = vectors
    return inputs, targets, _answer_weights(total, length + 1)


def _repeat_copy_example(rng, bits, repeat_scale, length, repeats):
    vectors = _random_bits(rng, (length, bits))
    total = length + 1 + repeats * length + 1
    inputs = np.zeros((total, bits + 2), np.float32)
    inputs[:length, :bits] = vectors
    inputs[length, bits] = 1.0
    inputs[length, bits + 1] = repeats / repeat_scale
    targets = np.zeros((total, bits + 1), np.float32)
    targets[length + 1 : total - 1, :bits] = np.tile(vectors, (repeats, 1))
    targets[total - 1, bits] = 1.0  # the end marker
    return inputs, targets, _answer_weights(total, length + 1)


def _associative_recall_example(rng, bits, item_length, num_items):
    # Distinct items, so that the query names exactly one item.
    while True:
        items = _random_bits(rng, (num_items, item_length, bits))
        if len(np.unique(items.reshape(num_items, -1), axis=0)) == num_items:
            break
    query = int(rng.integers(0, num_items - 1))
    step = item_length + 1
    query_start = num_items * step
    total = query_start + 2 + 2 * item_length
    inputs = np.zeros((total, bits + 2), np.float32)
    for i in range(num_items):
        inputs[i * step, bits] = 1.0
        inputs[i * step + 1 : (i + 1) * step, :bits] = items[i]
    inputs[query_start, bits + 1] = 1.0
    inputs[query_start + 1 : query_start + step, :bits] = items[query]
    inputs[query_start + step, bits + 1] = 1.0
    targets = np.zeros((total, bits), np.float32)
    targets[total - item_length :] = items[query + 1]
    return inputs, targets, _answer_weights(total, total - item_length)


def _priority_sort_example(rng, bits, num_inputs, num_outputs, priority_levels):
    vectors = _random_bits(rng, (num_inputs, bits))
    if priority_levels is None:
        priorities = rng.uniform(-1.0, 1.0, num_inputs).astype(np.float32)
    else:
        levels = np.linspace(-1.0, 1.0, priority_levels, dtype=np.float32)
        priorities = levels[rng.integers(0, priority_levels, num_inputs)]
    total = num_inputs + 1 + num_outputs
    inputs = np.zeros((total, bits + 2), np.float32)
    inputs[:num_inputs, :bits] = vectors
    inputs[:num_inputs, bits + 1] = priorities
    inputs[num_inputs, bits] = 1.0
    # Highest priority first; a stable sort keeps equal priorities in input order.
    order = np.argsort(-priorities, kind="stable")[:num_outputs]
    targets = np.zeros((total, bits), np.float32)
    targets[num_inputs + 1 :] = vectors[order]
    return inputs, targets, _answer_weights(total, num_inputs + 1)


def _check_range(where, low_name, low, high_name, high, minimum):
    low = check_int(where, low_name, low, minimum=minimum)
    high = check_int(where, high_name, high, minimum=low)
    return low, high


def _task_dataset(where, batch_size, bits, seed, num_batches, length_draw, draw_sizes,
                  make_example, target_width) -> tf.data.Dataset:
    """The shared dataset: batch `i` from `default_rng([seed, i])`, padded at the end."""
    batch_size = check_int(where, "batch_size", batch_size, minimum=1)
    seed = check_int(where, "seed", seed, minimum=0)
    num_batches = check_int(where, "num_batches", num_batches, minimum=1, allow_none=True)
    length_draw = check_choice(where, "length_draw", length_draw, _LENGTH_DRAWS)

    def make_batch(index):
        rng = np.random.default_rng([seed, index])
        shared = draw_sizes(rng) if length_draw == "batch" else None
        examples = [
            make_example(rng, bits, *(shared if shared is not None else draw_sizes(rng)))
            for _ in range(batch_size)
        ]
        total = max(len(w) for _, _, w in examples)
        inputs = np.zeros((batch_size, total, bits + 2), np.float32)
        targets = np.zeros((batch_size, total, target_width), np.float32)
        weights = np.zeros((batch_size, total), np.float32)
        for b, (x, y, w) in enumerate(examples):
            inputs[b, : len(w)], targets[b, : len(w)], weights[b, : len(w)] = x, y, w
        return inputs, targets, weights

    def generate():
        for index in itertools.count() if num_batches is None else range(num_batches):
            yield make_batch(index)

    signature = (
        tf.TensorSpec((batch_size, None, bits + 2), tf.float32),
        tf.TensorSpec((batch_size, None, target_width), tf.float32),
        tf.TensorSpec((batch_size, None), tf.float32),
    )
    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    if num_batches is not None:
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(num_batches))
    return dataset


def copy_task(
    batch_size: int = 32,
    min_length: int = 1,
    max_length: int = 20,
    bits: int = 8,
    seed: int = 0,
    num_batches: int | None = None,
    length_draw: str = "batch",
) -> tf.data.Dataset:
    """The copy task: read a sequence of random bit vectors, then write it back.

    For a sequence of length L (time steps of an example, `T = 2L + 1`):

        step          0 .. L-1        L             L+1 .. 2L
        inputs        vector_t, 0, 0  0, 1, 0       0, 0, 0
        targets       0               0             vector_{t-L-1}
        sample weight 0               0             1

    inputs have `bits + 2` channels (the data, the delimiter flag, and a
    control channel that is always 0 here, so that every task's inputs have
    the same layout); targets have `bits`. Each bit is 0 or 1 with
    probability 1/2.

    Args:
        batch_size: int, default 32. Examples per batch.
        min_length: int, default 1. The shortest sequence.
        max_length: int, default 20. The longest sequence; lengths are drawn
            uniformly from `[min_length, max_length]`.
        bits: int, default 8. The width of a vector.
        seed: int, default 0. Batch `i` depends only on `(seed, i)`: the
            dataset gives the same batches each time it is iterated.
        num_batches: int or None, default None. The number of batches; None:
            without end.
        length_draw: str, default `"batch"`. `"batch"`: one length per batch
            (no padding); `"example"`: one length per example, and a batch is
            padded at the end to its longest example with zero inputs,
            targets and sample weights.

    Returns:
        A dataset of `(inputs (B, T, bits + 2), targets (B, T, bits),
        sample_weight (B, T))` float32 tuples, ready for `Model.fit`.

    Examples:
        >>> inputs, targets, weights = next(iter(copy_task(2, 3, 3, num_batches=1)))
        >>> tuple(inputs.shape), tuple(targets.shape), weights[0].numpy().tolist()
        ((2, 7, 10), (2, 7, 8), [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
        >>> bool((targets[:, 4:] == inputs[:, :3, :8]).numpy().all())
        True
    """
    where = "copy_task"
    bits = check_int(where, "bits", bits, minimum=1)
    min_length, max_length = _check_range(where, "min_length", min_length, "max_length",
                                          max_length, minimum=1)
    return _task_dataset(
        where, batch_size, bits, seed, num_batches, length_draw,
        lambda rng: (int(rng.integers(min_length, max_length + 1)),),
        _copy_example, bits,
    )  # fmt: skip


def repeat_copy_task(
    batch_size: int = 32,
    min_length: int = 1,
    max_length: int = 10,
    min_repeats: int = 1,
    max_repeats: int = 10,
    bits: int = 8,
    repeat_scale: float = 10.0,
    seed: int = 0,
    num_batches: int | None = None,
    length_draw: str = "batch",
) -> tf.data.Dataset:
    """The repeat copy task: write a sequence back R times, then an end marker.

    For a sequence of length L repeated R times (`T = L + 1 + R·L + 1`):

        step          0 .. L-1        L                   L+1 .. L+R·L    T-1
        inputs        vector_t, 0, 0  0, 1, R/repeat_scale  0, 0, 0       0, 0, 0
        targets       0, 0            0, 0                the vectors     0, 1
                                                          R times, 0
        sample weight 0               0                   1               1

    inputs have `bits + 2` channels (the data, the delimiter flag, the repeat
    count divided by `repeat_scale`); targets have `bits + 1` (the data, and
    the end marker that must be written after the last copy).

    Args:
        batch_size: int, default 32. Examples per batch.
        min_length: int, default 1. The shortest sequence.
        max_length: int, default 10. The longest sequence (uniform lengths).
        min_repeats: int, default 1. The fewest repeats.
        max_repeats: int, default 10. The most repeats (uniform counts).
        bits: int, default 8. The width of a vector.
        repeat_scale: float, default 10.0. The repeat count is given as
            `R / repeat_scale`; keep it fixed when testing longer counts.
        seed: int, default 0. Batch `i` depends only on `(seed, i)`.
        num_batches: int or None, default None. None: without end.
        length_draw: str, default `"batch"`. `"batch"`: one length and count
            per batch; `"example"`: per example, padded at the end as in
            `copy_task`.

    Returns:
        A dataset of `(inputs (B, T, bits + 2), targets (B, T, bits + 1),
        sample_weight (B, T))` float32 tuples.

    Examples:
        >>> batch = repeat_copy_task(1, 2, 2, 3, 3, num_batches=1)
        >>> inputs, targets, weights = next(iter(batch))
        >>> tuple(inputs.shape), round(float(inputs[0, 2, 9]), 6), targets[0, -1].numpy().tolist()
        ((1, 10, 10), 0.3, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    """
    where = "repeat_copy_task"
    bits = check_int(where, "bits", bits, minimum=1)
    min_length, max_length = _check_range(where, "min_length", min_length, "max_length",
                                          max_length, minimum=1)
    min_repeats, max_repeats = _check_range(where, "min_repeats", min_repeats, "max_repeats",
                                            max_repeats, minimum=1)
    repeat_scale = check_float(where, "repeat_scale", repeat_scale, low=0.0, low_inclusive=False)

    def draw_sizes(rng):
        length = int(rng.integers(min_length, max_length + 1))
        return length, int(rng.integers(min_repeats, max_repeats + 1))

    def make_example(rng, bits, length, repeats):
        return _repeat_copy_example(rng, bits, repeat_scale, length, repeats)

    return _task_dataset(where, batch_size, bits, seed, num_batches, length_draw, draw_sizes,
                         make_example, bits + 1)


def associative_recall_task(
    batch_size: int = 32,
    min_items: int = 2,
    max_items: int = 6,
    item_length: int = 3,
    bits: int = 8,
    seed: int = 0,
    num_batches: int | None = None,
    length_draw: str = "batch",
) -> tf.data.Dataset:
    """Associative recall: after a list of items and a query item, write the next item.

    An item is `item_length` bit vectors; the K items of an example are
    distinct. Each item follows one step with the delimiter flag; the query
    (a copy of item q, q uniform in `[0, K - 2]`) sits between two steps with
    the query flag, and the answer, item q + 1, is written in the last
    `item_length` steps (`T = K·(item_length + 1) + 2 + 2·item_length`):

        inputs   [d item_0] .. [d item_{K-1}]  Q item_q Q  0 .. 0
        targets  0 ..                                      item_{q+1}
        weight   0 ..                                      1 .. 1

    (d: channel `bits` set; Q: channel `bits + 1` set). The paper uses 6-bit
    vectors (`bits=6`) and 2 to 6 items.

    Args:
        batch_size: int, default 32. Examples per batch.
        min_items: int, default 2. The fewest items (at least 2).
        max_items: int, default 6. The most items (uniform counts).
        item_length: int, default 3. Vectors per item.
        bits: int, default 8. The width of a vector.
        seed: int, default 0. Batch `i` depends only on `(seed, i)`.
        num_batches: int or None, default None. None: without end.
        length_draw: str, default `"batch"`. `"batch"`: one item count per
            batch; `"example"`: per example, padded at the end as in
            `copy_task`.

    Returns:
        A dataset of `(inputs (B, T, bits + 2), targets (B, T, bits),
        sample_weight (B, T))` float32 tuples.

    Examples:
        >>> batch = associative_recall_task(1, 2, 2, item_length=1, bits=4, num_batches=1)
        >>> inputs, targets, weights = next(iter(batch))
        >>> inputs[0, :, 4:].numpy().astype(int).tolist()
        [[1, 0], [0, 0], [1, 0], [0, 0], [0, 1], [0, 0], [0, 1], [0, 0]]
        >>> bool((targets[0, -1] == inputs[0, 3, :4]).numpy().all())
        True
    """
    where = "associative_recall_task"
    bits = check_int(where, "bits", bits, minimum=1)
    item_length = check_int(where, "item_length", item_length, minimum=1)
    min_items, max_items = _check_range(where, "min_items", min_items, "max_items", max_items,
                                        minimum=2)
    if 2 ** (bits * item_length) < max_items:
        raise invalid_value(where, "max_items", f"at most 2**(bits * item_length) = "
                            f"{2 ** (bits * item_length)} distinct items", max_items)
    return _task_dataset(
        where, batch_size, bits, seed, num_batches, length_draw,
        lambda rng: (item_length, int(rng.integers(min_items, max_items + 1))),
        _associative_recall_example, bits,
    )  # fmt: skip


def priority_sort_task(
    batch_size: int = 32,
    num_inputs: int = 20,
    num_outputs: int = 16,
    bits: int = 8,
    priority_levels: int | None = None,
    seed: int = 0,
    num_batches: int | None = None,
) -> tf.data.Dataset:
    """Priority sort: write the highest-priority input vectors, highest first.

    Each of the `num_inputs` vectors comes with a scalar priority on channel
    `bits + 1`, uniform in `[-1, 1)`; one step with the delimiter flag
    follows, and the answer is the `num_outputs` vectors of highest priority
    in decreasing priority, equal priorities in input order
    (`T = num_inputs + 1 + num_outputs`, the same for every example):

        step          0 .. N-1              N        N+1 .. N+M
        inputs        vector_t, 0, prio_t   0, 1, 0  0, 0, 0
        targets       0                     0        sorted vectors
        sample weight 0                     0        1

    The paper uses 20 inputs and 16 outputs.

    Args:
        batch_size: int, default 32. Examples per batch.
        num_inputs: int, default 20. Vectors to read (N).
        num_outputs: int, default 16. Vectors to write (M <= N).
        bits: int, default 8. The width of a vector.
        priority_levels: int or None, default None. None: continuous
            priorities; k >= 2: priorities drawn from the k evenly spaced
            values `linspace(-1, 1, k)` (equal priorities become common).
        seed: int, default 0. Batch `i` depends only on `(seed, i)`.
        num_batches: int or None, default None. None: without end.

    Returns:
        A dataset of `(inputs (B, T, bits + 2), targets (B, T, bits),
        sample_weight (B, T))` float32 tuples.

    Examples:
        >>> batch = priority_sort_task(1, num_inputs=3, num_outputs=2, num_batches=1)
        >>> inputs, targets, weights = next(iter(batch))
        >>> tuple(inputs.shape), weights[0].numpy().tolist()
        ((1, 6, 10), [0.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    """
    where = "priority_sort_task"
    bits = check_int(where, "bits", bits, minimum=1)
    num_inputs = check_int(where, "num_inputs", num_inputs, minimum=1)
    num_outputs = check_int(where, "num_outputs", num_outputs, minimum=1, maximum=num_inputs)
    priority_levels = check_int(where, "priority_levels", priority_levels, minimum=2,
                                allow_none=True)
    return _task_dataset(
        where, batch_size, bits, seed, num_batches, "batch",
        lambda rng: (num_inputs, num_outputs, priority_levels),
        _priority_sort_example, bits,
    )  # fmt: skip


def bit_errors(targets, outputs, sample_weight, from_logits: bool = True) -> float:
    """Bit errors per sequence: wrong bits in the answer part, averaged over sequences.

    An output bit is 1 where its probability exceeds 0.5 (a logit above 0
    with `from_logits=True`); a bit counts where its step's sample weight is
    positive (the answer part of the tasks above).

    Args:
        targets: array-like `(B, T, D)` of 0/1 targets.
        outputs: array-like `(B, T, D)`, logits or probabilities.
        sample_weight: array-like `(B, T)`.
        from_logits: bool, default True. Whether `outputs` are logits.

    Returns:
        The mean over the B sequences of each one's number of wrong bits.

    Examples:
        >>> targets = [[[1, 0], [1, 1]], [[0, 0], [0, 1]]]
        >>> logits = [[[3.0, -1.0], [-2.0, 2.0]], [[5.0, 5.0], [-1.0, 1.0]]]
        >>> bit_errors(targets, logits, [[0, 1], [1, 1]])
        1.5
    """
    where = "bit_errors"
    targets = np.asarray(targets, np.float32)
    outputs = np.asarray(outputs, np.float32)
    weights = np.asarray(sample_weight, np.float32)
    if targets.ndim != 3:
        raise shape_error(where, "targets", "(batch, time, bits)", targets.shape)
    if outputs.shape != targets.shape:
        raise shape_error(where, "outputs", f"the shape of `targets`, {targets.shape}", outputs.shape)
    if weights.shape != targets.shape[:2]:
        raise shape_error(where, "sample_weight", f"(batch, time) = {targets.shape[:2]}",
                          weights.shape)
    predicted = outputs > (0.0 if check_bool(where, "from_logits", from_logits) else 0.5)
    wrong = (predicted != (targets > 0.5)) & (weights[..., None] > 0)
    return float(wrong.sum(axis=(1, 2)).mean())
