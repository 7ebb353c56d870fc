"""The Neural Turing Machine's algorithmic tasks (`keras_seq.data`) and `bit_errors`.

Each task is checked against its written layout on small hand-checked cases
and, over many random examples, against properties recomputed here from the
inputs alone (the answer of copy is the input, the item after the query, the
vectors sorted by priority with ties in input order, ...).
"""

import dataclasses
import importlib.util
import json
import os
import sys

import keras
import numpy as np
import pytest

from keras_seq import data


def _batches(dataset):
    return [tuple(t.numpy() for t in batch) for batch in dataset]


def _length(weights):
    """Each example's length: its steps up to the last weighted one."""
    return [int(np.nonzero(w)[0].max()) + 1 for w in weights]


# ---------------------------------------------------------------------------
# Copy


def test_copy_matches_the_written_layout_on_a_small_case():
    (inputs, targets, weights), = _batches(data.copy_task(1, 2, 2, bits=3, seed=5, num_batches=1))
    v = inputs[0, :2, :3]
    assert set(np.unique(v)) <= {0.0, 1.0}
    expected_inputs = [
        [*v[0], 0, 0],
        [*v[1], 0, 0],
        [0, 0, 0, 1, 0],
        [0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0],
    ]
    expected_targets = [[0, 0, 0], [0, 0, 0], [0, 0, 0], [*v[0]], [*v[1]]]
    np.testing.assert_array_equal(inputs[0], expected_inputs)
    np.testing.assert_array_equal(targets[0], expected_targets)
    np.testing.assert_array_equal(weights[0], [0, 0, 0, 1, 1])


def test_copy_answer_is_the_input_and_padding_is_empty():
    batches = _batches(data.copy_task(16, 1, 9, seed=3, num_batches=8, length_draw="example"))
    lengths = []
    for inputs, targets, weights in batches:
        total = inputs.shape[1]
        for b, t in enumerate(_length(weights)):
            length = (t - 1) // 2
            lengths.append(length)
            assert t == 2 * length + 1
            np.testing.assert_array_equal(targets[b, length + 1 : t], inputs[b, :length, :8])
            np.testing.assert_array_equal(weights[b, :t], [0] * (length + 1) + [1] * length)
            assert inputs[b, length, 8] == 1 and inputs[b, :, 8].sum() == 1
            assert not inputs[b, :, 9].any()
            assert not inputs[b, length:, :8].any() and not targets[b, : length + 1].any()
            # Padding after the example: zero inputs, targets and weights.
            assert not inputs[b, t:].any() and not targets[b, t:].any() and not weights[b, t:].any()
        assert total == max(_length(weights))
    # One length per example, uniform over [1, 9]: every length appears.
    assert sorted(set(lengths)) == list(range(1, 10))
    assert all(len(set(_length(w))) > 1 for _, _, w in batches)


def test_batch_length_draw_gives_one_unpadded_length_per_batch():
    totals = set()
    for inputs, _, weights in _batches(data.copy_task(4, 1, 5, seed=0, num_batches=40)):
        assert set(_length(weights)) == {inputs.shape[1]}
        totals.add(inputs.shape[1])
    assert totals == {2 * length + 1 for length in range(1, 6)}


def test_tasks_are_deterministic_in_the_seed():
    for task, kwargs in [
        (data.copy_task, {}),
        (data.repeat_copy_task, {}),
        (data.associative_recall_task, {}),
        (data.priority_sort_task, {}),
    ]:
        dataset = task(4, seed=11, num_batches=3, **kwargs)
        first, again = _batches(dataset), _batches(dataset)
        fresh = _batches(task(4, seed=11, num_batches=3, **kwargs))
        other = _batches(task(4, seed=12, num_batches=3, **kwargs))
        for a, b, c in zip(first, again, fresh):
            for x, y, z in zip(a, b, c):
                np.testing.assert_array_equal(x, y)
                np.testing.assert_array_equal(x, z)
        assert any(
            a[0].shape != d[0].shape or not np.array_equal(a[0], d[0]) for a, d in zip(first, other)
        ), task.__name__
        # Batch i depends on (seed, i) only: a longer dataset starts with the same batches.
        longer = _batches(task(4, seed=11, num_batches=5, **kwargs))
        np.testing.assert_array_equal(longer[2][0], first[2][0])


def test_unbounded_dataset_continues_the_bounded_one():
    bounded = _batches(data.copy_task(2, seed=4, num_batches=3))
    unbounded = [tuple(t.numpy() for t in b) for b in data.copy_task(2, seed=4).take(4)]
    assert len(unbounded) == 4
    for a, b in zip(bounded, unbounded):
        np.testing.assert_array_equal(a[0], b[0])


# ---------------------------------------------------------------------------
# Repeat copy


def test_repeat_copy_matches_the_written_layout_on_a_small_case():
    dataset = data.repeat_copy_task(1, 2, 2, 2, 2, bits=2, repeat_scale=4.0, num_batches=1)
    (inputs, targets, weights), = _batches(dataset)
    v = inputs[0, :2, :2]
    np.testing.assert_array_equal(inputs[0], [
        [*v[0], 0, 0],
        [*v[1], 0, 0],
        [0, 0, 1, 0.5],
        *[[0, 0, 0, 0]] * 5,
    ])  # fmt: skip
    np.testing.assert_array_equal(targets[0], [
        [0, 0, 0], [0, 0, 0], [0, 0, 0],
        [*v[0], 0], [*v[1], 0], [*v[0], 0], [*v[1], 0],
        [0, 0, 1],
    ])  # fmt: skip
    np.testing.assert_array_equal(weights[0], [0, 0, 0, 1, 1, 1, 1, 1])


def test_repeat_copy_encodes_the_count_and_repeats_the_sequence():
    counts = set()
    dataset = data.repeat_copy_task(8, 1, 5, 1, 4, seed=2, num_batches=12, length_draw="example")
    for inputs, targets, weights in _batches(dataset):
        for b, t in enumerate(_length(weights)):
            (delimiter,) = np.nonzero(inputs[b, :, 8])[0]
            length = int(delimiter)
            repeats = inputs[b, delimiter, 9] * 10.0
            assert repeats == round(repeats)
            repeats = int(round(repeats))
            counts.add(repeats)
            assert t == length + 1 + repeats * length + 1
            answer = targets[b, length + 1 : t]
            expected = np.tile(inputs[b, :length, :8], (repeats, 1))
            np.testing.assert_array_equal(answer[:-1, :8], expected)
            np.testing.assert_array_equal(answer[:, 8], [0] * (repeats * length) + [1])
            assert not answer[-1, :8].any()
            assert weights[b, :t].sum() == repeats * length + 1
    assert counts == {1, 2, 3, 4}


# ---------------------------------------------------------------------------
# Associative recall


def test_associative_recall_matches_the_written_layout_on_a_small_case():
    dataset = data.associative_recall_task(1, 2, 2, item_length=2, bits=2, seed=1, num_batches=1)
    (inputs, targets, weights), = _batches(dataset)
    item0, item1 = inputs[0, 1:3, :2], inputs[0, 4:6, :2]
    # Two items: the query can only be the first, the answer the second.
    np.testing.assert_array_equal(inputs[0], [
        [0, 0, 1, 0], [*item0[0], 0, 0], [*item0[1], 0, 0],
        [0, 0, 1, 0], [*item1[0], 0, 0], [*item1[1], 0, 0],
        [0, 0, 0, 1], [*item0[0], 0, 0], [*item0[1], 0, 0], [0, 0, 0, 1],
        [0, 0, 0, 0], [0, 0, 0, 0],
    ])  # fmt: skip
    np.testing.assert_array_equal(targets[0, 10:], item1)
    assert not targets[0, :10].any()
    np.testing.assert_array_equal(weights[0], [0] * 10 + [1, 1])


def test_associative_recall_answer_is_the_item_after_the_query():
    queries, counts = set(), set()
    dataset = data.associative_recall_task(8, 2, 6, bits=3, seed=9, num_batches=20,
                                           length_draw="example")
    for inputs, targets, weights in _batches(dataset):
        for b, t in enumerate(_length(weights)):
            starts = np.nonzero(inputs[b, :, 3])[0]
            items = [inputs[b, s + 1 : s + 4, :3] for s in starts]
            counts.add(len(items))
            flags = np.nonzero(inputs[b, :, 4])[0]
            assert len(flags) == 2 and flags[1] - flags[0] == 4 and flags[0] == starts[-1] + 4
            query = inputs[b, flags[0] + 1 : flags[1], :3]
            matches = [i for i, item in enumerate(items) if np.array_equal(item, query)]
            # The items are distinct, the query is one of them and not the last.
            assert len({item.tobytes() for item in items}) == len(items)
            assert len(matches) == 1 and matches[0] < len(items) - 1
            queries.add(matches[0])
            assert t == flags[1] + 4
            np.testing.assert_array_equal(targets[b, t - 3 : t], items[matches[0] + 1])
            np.testing.assert_array_equal(weights[b, :t], [0] * (t - 3) + [1] * 3)
    assert counts == {2, 3, 4, 5, 6} and queries == {0, 1, 2, 3, 4}


# ---------------------------------------------------------------------------
# Priority sort


def test_priority_sort_answer_is_sorted_by_priority_with_stable_ties():
    ties = 0
    for levels in (None, 3):
        dataset = data.priority_sort_task(8, num_inputs=7, num_outputs=5, bits=4,
                                          priority_levels=levels, seed=6, num_batches=5)
        for inputs, targets, weights in _batches(dataset):
            assert inputs.shape[1] == 7 + 1 + 5
            np.testing.assert_array_equal(weights, np.tile([0] * 8 + [1] * 5, (8, 1)))
            for b in range(8):
                priorities = inputs[b, :7, 5]
                assert np.all(np.abs(priorities) <= 1)
                if levels is not None:
                    assert set(priorities) <= {-1.0, 0.0, 1.0}
                    ties += len(priorities) - len(set(priorities))
                rows = sorted(range(7), key=lambda i: -priorities[i])  # sorted() is stable
                np.testing.assert_array_equal(targets[b, 8:], inputs[b, rows[:5], :4])
                np.testing.assert_array_equal(inputs[b, 7], [0, 0, 0, 0, 1, 0])
    assert ties > 0


def test_priority_sort_ties_keep_input_order_on_a_hand_case():
    # With one priority level pair, -1 and 1 only: find an example whose
    # priorities tie and check the order by hand-written rule.
    dataset = data.priority_sort_task(64, num_inputs=3, num_outputs=3, bits=6, priority_levels=2,
                                      num_batches=1)
    (inputs, targets, _), = _batches(dataset)
    seen = set()
    for b in range(64):
        p = tuple(inputs[b, :3, 7].astype(int))
        v = inputs[b, :3, :6]
        high = [i for i in range(3) if p[i] == 1]
        low = [i for i in range(3) if p[i] == -1]
        np.testing.assert_array_equal(targets[b, 4:], v[high + low])
        seen.add(p)
    assert len(seen) == 8  # every pattern of three priorities, all ties included


# ---------------------------------------------------------------------------
# Bit errors


def test_bit_errors_counts_wrong_answer_bits_per_sequence():
    targets = np.array([[[1, 0, 1], [0, 0, 1]], [[1, 1, 1], [0, 1, 0]]], np.float32)
    logits = np.array([[[2, 1, 3], [-1, 4, -2]], [[-3, 1, 1], [1, -1, 1]]], np.float32)
    weights = np.array([[1, 1], [0, 1]], np.float32)
    # Sequence 0: bit 1 of step 0, bits 1 and 2 of step 1 -> 3; sequence 1:
    # step 0 is not in the answer, step 1 has all three bits wrong -> 3.
    assert data.bit_errors(targets, logits, weights) == 3.0
    probabilities = 1 / (1 + np.exp(-logits))
    assert data.bit_errors(targets, probabilities, weights, from_logits=False) == 3.0
    assert data.bit_errors(targets, logits, np.ones((2, 2))) == 3.5
    assert data.bit_errors(targets, 10 * (2 * targets - 1), np.ones((2, 2))) == 0.0


def test_bit_errors_equals_a_loop_over_bits():
    rng = np.random.default_rng(0)
    targets = rng.integers(0, 2, (5, 7, 4)).astype("float32")
    logits = rng.normal(size=(5, 7, 4)).astype("float32")
    weights = (rng.uniform(size=(5, 7)) > 0.4).astype("float32")
    wrong = 0
    for b in range(5):
        for t in range(7):
            for k in range(4):
                if weights[b, t] and (logits[b, t, k] > 0) != (targets[b, t, k] == 1):
                    wrong += 1
    assert data.bit_errors(targets, logits, weights) == pytest.approx(wrong / 5)


# ---------------------------------------------------------------------------
# Bad arguments


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: data.copy_task(0), ValueError, "`batch_size`"),
        (lambda: data.copy_task(min_length=0), ValueError, "`min_length`"),
        (lambda: data.copy_task(min_length=5, max_length=4), ValueError, "`max_length`"),
        (lambda: data.copy_task(bits="8"), TypeError, "`bits`"),
        (lambda: data.copy_task(seed=-1), ValueError, "`seed`"),
        (lambda: data.copy_task(length_draw="step"), ValueError, "`length_draw`"),
        (lambda: data.copy_task(num_batches=0), ValueError, "`num_batches`"),
        (lambda: data.repeat_copy_task(min_repeats=3, max_repeats=2), ValueError, "`max_repeats`"),
        (lambda: data.repeat_copy_task(repeat_scale=0), ValueError, "`repeat_scale`"),
        (lambda: data.associative_recall_task(min_items=1), ValueError, "`min_items`"),
        (lambda: data.associative_recall_task(max_items=5, bits=1, item_length=2), ValueError,
         "`max_items`"),
        (lambda: data.priority_sort_task(num_inputs=3, num_outputs=4), ValueError,
         "`num_outputs`"),
        (lambda: data.priority_sort_task(priority_levels=1), ValueError, "`priority_levels`"),
        (lambda: data.bit_errors(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros(2)), ValueError,
         "`targets`"),
        (lambda: data.bit_errors(np.zeros((2, 3, 1)), np.zeros((2, 3, 2)), np.zeros((2, 3))),
         ValueError, "`outputs`"),
        (lambda: data.bit_errors(np.zeros((2, 3, 1)), np.zeros((2, 3, 1)), np.zeros((2,))),
         ValueError, "`sample_weight`"),
    ],
)
def test_bad_arguments_are_named(call, error, words):
    with pytest.raises(error, match=words):
        call()


# ---------------------------------------------------------------------------
# The example (examples/ntm_copy.py)


@pytest.fixture(scope="module")
def example():
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                        "ntm_copy.py")
    spec = importlib.util.spec_from_file_location("ntm_copy_example", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_lstm_baseline_has_about_the_ntm_parameter_count(example):
    task = example.TASKS["copy"]
    for target in (5_000, 62_680):
        sizes = {}
        for u in (example.lstm_units_like(target, 10, 8) + d for d in (-1, 0, 1)):
            sizes[u] = keras.Sequential([
                keras.Input((None, 10)), keras.layers.LSTM(u), keras.layers.Dense(8),
            ]).count_params()  # fmt: skip
        best = min(sizes, key=lambda u: abs(sizes[u] - target))
        assert best == example.lstm_units_like(target, 10, 8), sizes
    assert abs(example.build_lstm(task, 62_680).count_params() - 62_680) < 1_000


@pytest.mark.slow
def test_example_training_lowers_the_loss_on_a_fixed_batch(example):
    task = dataclasses.replace(example.TASKS["copy"], train_sizes={"min_length": 1, "max_length": 3})
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((None, 10)), keras.layers.LSTM(32, return_sequences=True),
        keras.layers.Dense(8),
    ])  # fmt: skip
    (inputs, targets, weights), = _batches(data.copy_task(16, 3, 3, seed=99, num_batches=1))

    def loss():
        return float(example.masked_loss(targets, model(inputs), weights))

    before = loss()
    trained = example.train(model, task, 150, batch_size=16, log_every=50)
    assert trained["steps"] == 150 and len(trained["history"]) == 3
    assert loss() < 0.8 * before


@pytest.mark.slow
def test_example_run_reports_the_recomputed_bit_errors(example, tmp_path):
    out = tmp_path / "results.json"
    results, models = example.run("copy", steps=5, models=("lstm",), eval_batches=1,
                                  batch_size=8, out=str(out))
    written = json.loads(out.read_text())
    assert written == results and set(written) == {"lstm"} and written["lstm"]["steps"] == 5
    assert written["lstm"]["train_seconds"] > 0
    # The reported bit errors are those of the trained model on the test batches,
    # counted here bit by bit.
    model = models["lstm"]
    for length in (20, 40, 80):
        (inputs, targets, weights), = _batches(data.copy_task(
            8, length, length, seed=10_000, num_batches=1))
        logits = model(inputs).numpy()
        wrong = sum(
            int((logits[b, t, k] > 0) != (targets[b, t, k] == 1))
            for b in range(8) for t in range(inputs.shape[1]) if weights[b, t]
            for k in range(8)
        )
        assert written["lstm"]["bit_errors"][str(length)] == pytest.approx(wrong / 8)
