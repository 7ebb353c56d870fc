"""Date task (checked by an independent strptime parser), TSV loader, tf.data pipeline."""

import collections
import datetime
import re
import time

import numpy as np
import pytest

from keras_seq import data, text

# The formats the task promises, written as strptime patterns; an ordinal day
# ("21st") is checked separately and then read as %d.
_STRPTIME_FORMATS = (
    "%A, %d %B %Y",
    "%A %d %B %Y",
    "%a, %d %b %Y",
    "%A, %B %d, %Y",
    "%a, %b %d, %Y",
    "%d %B %Y",
    "%d %b %Y",
    "%d %b %y",
    "%B %d, %Y",
    "%b %d, %Y",
    "%d of %B %Y",
    "%d-%b-%Y",
    "%d-%b-%y",
    "%Y %m %d",
    "%Y-%m-%d",
    "%Y/%m/%d",
    "%Y.%m.%d",
    "%Y%m%d",
    "%d.%m.%Y",
    "%d.%m.%y",
    "%d/%m/%Y",
    "%d/%m/%y",
    "%d-%m-%Y",
    "%d-%m-%y",
    "%d %m %Y",
)
_ORDINAL = re.compile(r"\b(\d{1,2})(st|nd|rd|th)\b", re.IGNORECASE)


def _english_ordinal_suffix(n):
    if 10 <= n % 100 <= 20:
        return "th"
    return ["th", "st", "nd", "rd", "th", "th", "th", "th", "th", "th"][n % 10]


def _parse_all(source):
    """Every (date, format) that `source` can be read as, over all promised formats."""

    def strip_ordinal(match):
        day, suffix = int(match.group(1)), match.group(2).lower()
        assert suffix == _english_ordinal_suffix(day), source
        return match.group(1)

    plain = _ORDINAL.sub(strip_ordinal, source)
    readings = set()
    for pattern in _STRPTIME_FORMATS:
        try:
            parsed = time.strptime(plain, pattern)
        except ValueError:
            continue
        date = datetime.date(parsed.tm_year, parsed.tm_mon, parsed.tm_mday)
        # strptime reads a weekday name without checking it against the date.
        if "%a" in pattern.lower():
            assert parsed.tm_wday == date.weekday(), source
        readings.add((date, pattern))
    return readings


def _posix_pivot(two_digits):
    return (1900 if two_digits >= 69 else 2000) + two_digits


@pytest.fixture(scope="module")
def small_task():
    return data.date_task(train_size=3000, validation_size=500, test_size=500, seed=7)


# ---------------------------------------------------------------------------
# Date task


def test_every_source_names_exactly_its_target(small_task):
    used_patterns = set()
    cases = collections.Counter()
    for split in small_task.values():
        for source, target in split:
            readings = _parse_all(source)
            dates = {date for date, _ in readings}
            assert dates == {datetime.date.fromisoformat(target)}, (source, target, readings)
            used_patterns |= {pattern for _, pattern in readings}
            letters = re.sub(r"[^A-Za-z]", "", source)
            if letters:
                cases[
                    "lower" if letters.islower() else "upper" if letters.isupper() else "mixed"
                ] += 1
    assert used_patterns == set(_STRPTIME_FORMATS)
    assert min(cases.values()) > 0 and len(cases) == 3


def test_two_digit_years_follow_posix_pivot(small_task):
    seen_centuries = set()
    for source, target in small_task["train"]:
        match = re.fullmatch(r"\d{1,2}[./-]\d{1,2}[./-](\d{2})|\d{1,2}[ -]\w{3}[ -](\d{2})", source)
        if match:
            two_digits = int(match.group(1) or match.group(2))
            assert int(target[:4]) == _posix_pivot(two_digits), source
            seen_centuries.add(target[:2])
    assert seen_centuries == {"19", "20"}


def test_targets_are_iso_dates_spread_over_the_century(small_task):
    dates = [datetime.date.fromisoformat(t) for split in small_task.values() for _, t in split]
    for split in small_task.values():
        for _, target in split:
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", target)
    assert min(dates) >= datetime.date(1969, 1, 1) and max(dates) <= datetime.date(2068, 12, 31)
    # Uniform over 36,525 days: each decade holds ~10% of the 4,000 dates.
    decades = np.bincount([(d.year - 1969) // 10 for d in dates], minlength=10)
    assert (
        decades.size == 10
        and decades.min() > 0.07 * len(dates)
        and decades.max() < 0.13 * len(dates)
    )


def test_splits_are_disjoint_and_sized(small_task):
    sources = {name: [s for s, _ in pairs] for name, pairs in small_task.items()}
    assert {name: len(s) for name, s in sources.items()} == {
        "train": 3000,
        "validation": 500,
        "test": 500,
    }
    all_sources = [s for split in sources.values() for s in split]
    assert len(set(all_sources)) == len(all_sources)


def test_date_task_is_deterministic_in_seed(small_task):
    again = data.date_task(train_size=3000, validation_size=500, test_size=500, seed=7)
    other = data.date_task(train_size=3000, validation_size=500, test_size=500, seed=8)
    assert again == small_task
    assert data.date_task(3000, 500, 500, seed=np.int64(7)) == small_task
    assert other["train"] != small_task["train"]


def test_test_split_does_not_depend_on_train_size(small_task):
    smaller = data.date_task(train_size=10, validation_size=500, test_size=500, seed=7)
    assert smaller["test"] == small_task["test"]
    assert smaller["train"] == small_task["train"][:10]


def test_date_task_rejects_bad_sizes():
    with pytest.raises(ValueError, match="train_size"):
        data.date_task(train_size=-1)
    with pytest.raises(ValueError, match="test_size"):
        data.date_task(test_size=2.5)
    with pytest.raises(TypeError, match="seed"):
        data.date_task(seed="0")


# ---------------------------------------------------------------------------
# TSV loader


def test_load_tsv_reads_pairs_and_ignores_extra_fields(tmp_path):
    path = tmp_path / "corpus.tsv"
    path.write_bytes(
        "\ufeffGo.\tVa !\tCC-BY 2.0 (France)\r\n\n  \nHi.\tSalut.\n日本\t😀\n".encode()
    )
    assert data.load_tsv(path) == [("Go.", "Va !"), ("Hi.", "Salut."), ("日本", "😀")]
    assert data.load_tsv(path, max_examples=2) == [("Go.", "Va !"), ("Hi.", "Salut.")]
    assert data.load_tsv(str(path), max_examples=0) == []


@pytest.mark.parametrize(
    "bad_line,reason",
    [
        (b"no tab here", "no tab"),
        (b"\tmissing source", "empty source"),
        (b"missing target\t", "empty target"),
        (b"   \tblank source", "empty source"),
        (b"bad\xff bytes\tx", "UTF-8"),
    ],
)
def test_load_tsv_malformed_line_names_file_and_line(tmp_path, bad_line, reason):
    path = tmp_path / "broken.tsv"
    path.write_bytes(b"a\tb\n\nc\td\n" + bad_line + b"\ne\tf\n")
    with pytest.raises(ValueError, match=rf"broken\.tsv, line 4: .*{reason}"):
        data.load_tsv(path)


# ---------------------------------------------------------------------------
# tf.data pipeline


@pytest.fixture(scope="module")
def tokenizers(small_task):
    source = text.CharTokenizer.from_corpus(s for s, _ in small_task["train"])
    target = text.CharTokenizer.from_corpus(t for _, t in small_task["train"])
    return source, target


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
