"""The teacher-forcing tf.data pipeline (`keras_seq.data.pipeline`)."""

import collections

import numpy as np
import pytest

from keras_seq import data


def _reference_ids(s, vocabulary):
    return [vocabulary.index(ch) for ch in s]


def test_make_dataset_builds_teacher_forcing_batches(small_task, tokenizers):
    source_tokenizer, target_tokenizer = tokenizers
    pairs = small_task["test"][:10] + [("Saturday, 21 November 2026", "2026-11-21")]
    source_length, target_length = 16, 8  # both truncate some examples
    dataset = data.make_dataset(
        pairs, source_tokenizer, target_tokenizer, 4, source_length, target_length
    )
    batches = list(dataset)
    assert [b[1].shape[0] for b in batches] == [4, 4, 3]
    rows = []
    for inputs, targets in batches:
        assert set(inputs) == {"encoder_inputs", "decoder_inputs"}
        for tensor in (inputs["encoder_inputs"], inputs["decoder_inputs"], targets):
            assert tensor.dtype == "int32"
        rows += zip(
            inputs["encoder_inputs"].numpy().tolist(),
            inputs["decoder_inputs"].numpy().tolist(),
            targets.numpy().tolist(),
        )
    for (source, target), (encoder_row, decoder_row, target_row) in zip(pairs, rows):
        s = _reference_ids(source, source_tokenizer.vocabulary)[:source_length]
        t = _reference_ids(target, target_tokenizer.vocabulary)[: target_length - 1]
        assert encoder_row == s + [0] * (source_length - len(s))
        assert decoder_row == [2] + t + [0] * (target_length - 1 - len(t))
        assert target_row == t + [3] + [0] * (target_length - 1 - len(t))


def test_make_dataset_shuffles_deterministically_with_seed(small_task, tokenizers):
    source_tokenizer, target_tokenizer = tokenizers
    pairs = small_task["validation"][:64]

    def first_epoch(seed):
        dataset = data.make_dataset(pairs, source_tokenizer, target_tokenizer, 16, 32, 12, seed)
        return [row for _, targets in dataset for row in targets.numpy().tolist()]

    ordered, shuffled, again = first_epoch(None), first_epoch(1), first_epoch(1)
    expected = [
        _reference_ids(t, target_tokenizer.vocabulary) + [3] for _, t in pairs
    ]  # ISO dates fit: 10 characters + [END] < 12
    assert [row[:11] for row in ordered] == expected
    assert shuffled == again and shuffled != ordered
    assert sorted(shuffled) == sorted(ordered)


def test_make_dataset_buckets_pad_each_batch_to_its_bucket(small_task, tokenizers):
    source_tokenizer, target_tokenizer = tokenizers
    pairs = small_task["train"][:300] + [("Saturday, 21 November 2026 11", "2026-11-21")]
    source_length, buckets = 28, (10, 16, 24)  # the long source is truncated to 28
    dataset = data.make_dataset(
        pairs, source_tokenizer, target_tokenizer, 16, source_length, 12,
        shuffle_seed=3, bucket_lengths=buckets,
    )
    seen = collections.Counter()
    widths = set()
    assert len(dataset) == len(list(dataset))
    for inputs, targets in dataset:
        encoder = inputs["encoder_inputs"].numpy()
        width = encoder.shape[1]
        widths.add(width)
        lengths = (encoder != 0).sum(axis=1)  # no source holds a [PAD] character
        # The batch is padded to the smallest bucket that holds its longest source.
        assert width == min(b for b in (*buckets, source_length) if b >= lengths.max())
        lower = max([0] + [b for b in (*buckets, source_length) if b < width])
        assert np.all(lengths > lower)  # every source belongs to this bucket
        for row, target in zip(encoder.tolist(), targets.numpy().tolist()):
            seen[(tuple(row + [0] * (source_length - width)), tuple(target))] += 1
    expected = collections.Counter()
    for source, target in pairs:
        s = _reference_ids(source, source_tokenizer.vocabulary)[:source_length]
        t = _reference_ids(target, target_tokenizer.vocabulary)[:11]
        expected[(tuple(s + [0] * (source_length - len(s))), tuple(t + [3] + [0] * (11 - len(t))))] += 1
    assert seen == expected  # every pair exactly once, losslessly
    assert widths == {10, 16, 24, 28}
    with pytest.raises(ValueError, match="bucket_lengths"):
        data.make_dataset(pairs, source_tokenizer, target_tokenizer, 4, 16, 8,
                          bucket_lengths=(8, 8))
    with pytest.raises(ValueError, match="bucket_lengths"):
        data.make_dataset(pairs, source_tokenizer, target_tokenizer, 4, 16, 8,
                          bucket_lengths=(8, 16))


def test_make_dataset_buckets_with_epochs_give_full_batches(small_task, tokenizers):
    source_tokenizer, target_tokenizer = tokenizers
    # One pair longer than 24: the last bucket holds fewer pairs than a batch.
    pairs = small_task["train"][:300] + [("Saturday, 21 November 2026 11", "2026-11-21")]
    source_length, buckets, batch_size = 28, (10, 16, 24), 16

    def epochs(first, last):
        dataset = data.make_dataset(
            pairs, source_tokenizer, target_tokenizer, batch_size, source_length, 12,
            shuffle_seed=5, bucket_lengths=buckets, epochs=last, first_epoch=first,
        )
        assert len(dataset) == (last - first) * -(-len(pairs) // batch_size)
        return [(inputs["encoder_inputs"].numpy(), targets.numpy()) for inputs, targets in dataset]

    both = epochs(0, 2)
    per_epoch = len(both) // 2
    expected = collections.Counter()
    for source, _target in pairs:
        s = _reference_ids(source, source_tokenizer.vocabulary)[:source_length]
        expected[tuple(s + [0] * (source_length - len(s)))] += 1
    for epoch in (both[:per_epoch], both[per_epoch:]):
        seen = collections.Counter()
        short = 0
        for encoder, _ in epoch:
            width = encoder.shape[1]
            lengths = (encoder != 0).sum(axis=1)
            assert width == min(b for b in (*buckets, source_length) if b >= lengths.max())
            short += len(encoder) < batch_size
            for row in encoder.tolist():
                seen[tuple(row + [0] * (source_length - width))] += 1
        assert seen == expected  # every pair once per epoch
        assert short <= 1  # one batch shape per bucket, plus one
    # Bucket sizes are not multiples of 16 here, so some batch mixes buckets
    # (the leftovers), and the two epochs are ordered differently.
    assert [e.shape for e, _ in both[:per_epoch]] != [e.shape for e, _ in both[per_epoch:]]
    # Epoch 1 depends only on (seed, 1): a resumed run sees the same batches.
    again = epochs(1, 2)
    assert len(again) == per_epoch
    for (e1, t1), (e2, t2) in zip(both[per_epoch:], again):
        np.testing.assert_array_equal(e1, e2)
        np.testing.assert_array_equal(t1, t2)


def test_make_dataset_rejects_bad_arguments(tokenizers):
    source_tokenizer, target_tokenizer = tokenizers
    pairs = [("21 Nov 2026", "2026-11-21")]
    with pytest.raises(ValueError, match="batch_size"):
        data.make_dataset(pairs, source_tokenizer, target_tokenizer, 0, 8, 8)
    with pytest.raises(ValueError, match="target_length"):
        data.make_dataset(pairs, source_tokenizer, target_tokenizer, 2, 8, 1)
    with pytest.raises(ValueError, match="empty"):
        data.make_dataset([], source_tokenizer, target_tokenizer, 2, 8, 8)
    with pytest.raises(ValueError, match=r"pairs\[0\]"):
        data.make_dataset([("only source",)], source_tokenizer, target_tokenizer, 2, 8, 8)
