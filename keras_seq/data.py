"""Data: the embedded date-normalisation task, a TSV loader, text for language
models, the Neural Turing Machine's tasks and the tf.data pipelines.

The date task ships with the package and needs no download: dates drawn
uniformly from 1969-01-01 to 2068-12-31, written in one of `DATE_FORMATS`
(weekday and month names, ordinals, numeric day-first dates with `.`, `/`, `-`
or space separators, two-digit years) in original, lower or upper case, paired
with the ISO 8601 date "YYYY-MM-DD". Two-digit years follow the POSIX pivot
(69-99 -> 1969-1999, 00-68 -> 2000-2068), which is why the date range is
exactly the century those years can name; numeric dates are always day first
unless the year comes first with four digits, so every source names one date.

Character language models read one text (`load_text`, by default tiny
Shakespeare, `tiny_shakespeare`), hold out its end (`split_text`), train on
random windows (`make_text_dataset`) and are scored on consecutive windows of
the held-out text (`text_windows`).

The algorithmic tasks of the Neural Turing Machine paper (Graves et al. 2014,
section 4) are seeded `tf.data` generators of random bit vectors with
delimiter channels: `copy_task`, `repeat_copy_task`, `associative_recall_task`
and `priority_sort_task`, scored with `bit_errors`.
"""

from __future__ import annotations

import datetime
import itertools
import os
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from keras_seq.text import CharTokenizer, WordPieceTokenizer

__all__ = [
    "FIRST_DATE",
    "LAST_DATE",
    "DATE_FORMATS",
    "HELD_OUT_FRACTION",
    "TINY_SHAKESPEARE_SHA256",
    "TINY_SHAKESPEARE_URL",
    "date_task",
    "load_text",
    "load_tsv",
    "make_dataset",
    "make_text_dataset",
    "split_text",
    "text_windows",
    "tiny_shakespeare",
    "copy_task",
    "repeat_copy_task",
    "associative_recall_task",
    "priority_sort_task",
    "bit_errors",
]

FIRST_DATE = datetime.date(1969, 1, 1)
LAST_DATE = datetime.date(2068, 12, 31)

# Placeholders: {A}/{a} weekday name full/abbreviated, {B}/{b} month name
# full/abbreviated, {d}/{dd} day unpadded/zero-padded, {o} ordinal day ("21st"),
# {m}/{mm} month number unpadded/zero-padded, {Y} four-digit and {y} two-digit year.
DATE_FORMATS = (
    "{A}, {d} {B} {Y}",  # Saturday, 21 November 2026
    "{A} {d} {B} {Y}",
    "{a}, {d} {b} {Y}",  # Sat, 21 Nov 2026
    "{A}, {B} {o}, {Y}",  # Saturday, November 21st, 2026
    "{a}, {b} {d}, {Y}",  # Sat, Nov 21, 2026
    "{d} {B} {Y}",
    "{d} {b} {Y}",  # 21 Nov 2026
    "{dd} {b} {Y}",
    "{d} {b} {y}",  # 21 Nov 26
    "{B} {d}, {Y}",  # November 21, 2026
    "{b} {d}, {Y}",
    "{b} {o}, {Y}",  # Nov 21st, 2026
    "{B} {o}, {Y}",
    "{o} {B} {Y}",  # 21st November 2026
    "{o} of {B} {Y}",  # 21st of November 2026
    "{dd}-{b}-{Y}",  # 21-Nov-2026
    "{dd}-{b}-{y}",
    "{Y} {mm} {dd}",  # 2026 11 21
    "{Y}-{mm}-{dd}",
    "{Y}/{mm}/{dd}",
    "{Y}.{mm}.{dd}",
    "{Y}{mm}{dd}",  # 20261121
    "{dd}.{mm}.{Y}",  # 21.11.2026
    "{d}.{m}.{Y}",
    "{dd}.{mm}.{y}",
    "{dd}/{mm}/{Y}",
    "{dd}/{mm}/{y}",  # 21/11/26
    "{d}/{m}/{y}",
    "{dd}-{mm}-{Y}",
    "{dd}-{mm}-{y}",
    "{dd} {mm} {Y}",
)

_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_CASES = (str, str.lower, str.upper)
# Far more distinct strings exist (about 36,525 dates x 31 formats x 3 cases);
# the cap keeps rejection sampling of unseen strings fast.
_MAX_DATE_EXAMPLES = 1_000_000


def _ordinal(day: int) -> str:
    if day in (11, 12, 13):
        return f"{day}th"
    return f"{day}" + {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


def _date_fields(date: datetime.date) -> dict[str, str]:
    weekday, month = _WEEKDAYS[date.weekday()], _MONTHS[date.month - 1]
    return {
        "A": weekday,
        "a": weekday[:3],
        "B": month,
        "b": month[:3],
        "d": str(date.day),
        "dd": f"{date.day:02d}",
        "o": _ordinal(date.day),
        "m": str(date.month),
        "mm": f"{date.month:02d}",
        "Y": f"{date.year:04d}",
        "y": f"{date.year % 100:02d}",
    }


def date_task(
    train_size: int = 50_000,
    validation_size: int = 5_000,
    test_size: int = 10_000,
    seed: int = 0,
) -> dict[str, list[tuple[str, str]]]:
    """Generates the date-normalisation task: human-written dates -> ISO 8601.

    The splits are drawn test first, then validation, then train, from one
    random stream, and no source string is drawn twice, so no input appears in
    two splits (or twice in one), and the test split does not change with
    `train_size`. The same arguments always give the same pairs.

    Args:
        train_size: number of training pairs.
        validation_size: number of validation pairs.
        test_size: number of test pairs.
        seed: seed of the random stream.

    Returns:
        `{"train": [...], "validation": [...], "test": [...]}`, each a list of
        `(source, target)` pairs such as `("Nov 21st, 2026", "2026-11-21")`.

    Examples:
        >>> task = date_task(train_size=3, validation_size=1, test_size=1, seed=1)
        >>> sorted(task)
        ['test', 'train', 'validation']
        >>> len(task["train"])
        3
    """
    sizes = {"test": test_size, "validation": validation_size, "train": train_size}
    sizes = {name: check_int("date_task", f"{name}_size", n, minimum=0) for name, n in sizes.items()}
    if sum(sizes.values()) > _MAX_DATE_EXAMPLES:
        raise ValueError(
            f"date_task: at most {_MAX_DATE_EXAMPLES} examples in all, received {sum(sizes.values())}."
        )
    seed = check_int("date_task", "seed", seed)

    rng = random.Random(int(seed))
    first = FIRST_DATE.toordinal()
    num_days = LAST_DATE.toordinal() - first + 1
    seen: set[str] = set()
    splits: dict[str, list[tuple[str, str]]] = {}
    for name, size in sizes.items():
        pairs: list[tuple[str, str]] = []
        while len(pairs) < size:
            date = datetime.date.fromordinal(first + rng.randrange(num_days))
            template = DATE_FORMATS[rng.randrange(len(DATE_FORMATS))]
            source = _CASES[rng.randrange(len(_CASES))](template.format(**_date_fields(date)))
            if source in seen:
                continue
            seen.add(source)
            pairs.append((source, date.isoformat()))
        splits[name] = pairs
    return {"train": splits["train"], "validation": splits["validation"], "test": splits["test"]}


def load_tsv(path: str | os.PathLike, max_examples: int | None = None) -> list[tuple[str, str]]:
    """Reads a parallel corpus `source<TAB>target[<TAB>anything]`, one pair a line.

    This is the Tatoeba/Anki export format; fields after the second (such as
    attribution) are ignored. Blank lines are skipped; the file is UTF-8 (a
    leading byte-order mark is allowed).

    Args:
        path: the file.
        max_examples: stop after this many pairs (`None`: read all).

    Returns:
        List of `(source, target)` pairs.

    Raises:
        ValueError: naming the file and 1-based line number, for a line with
            fewer than two fields, an empty source or target, or invalid UTF-8.
    """
    max_examples = check_int("load_tsv", "max_examples", max_examples, minimum=0, allow_none=True)
    path = os.fspath(path)
    pairs: list[tuple[str, str]] = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            if max_examples is not None and len(pairs) >= max_examples:
                break
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(f"{path}, line {number}: not valid UTF-8 ({error}).") from None
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) < 2:
                raise ValueError(
                    f"{path}, line {number}: expected source<TAB>target, found no tab "
                    f"in {line[:60]!r}."
                )
            source, target = fields[0], fields[1]
            for field_name, value in (("source", source), ("target", target)):
                if not value.strip():
                    raise ValueError(f"{path}, line {number}: empty {field_name} in {line[:60]!r}.")
            pairs.append((source, target))
    return pairs


def split_pairs(
    pairs: Sequence[tuple[str, str]], validation_size: int, test_size: int, seed: int = 0
) -> dict[str, list[tuple[str, str]]]:
    """Shuffles a corpus with ``seed`` and splits it into train, validation and test.

    The split ``keras-seq train --data FILE.tsv`` uses: after the shuffle,
    the first ``min(test_size, max(1, n // 10))`` pairs are the test split,
    the next ``min(validation_size, max(1, n // 20))`` the validation split,
    the rest the training split. The same arguments give the same split, so
    the test pairs can be drawn again later (`keras_seq.export.export_run`).

    Args:
        pairs: at least 3 ``(source, target)`` pairs.
        validation_size: the most validation pairs.
        test_size: the most test pairs.
        seed: seed of the shuffle.

    Returns:
        ``{"train": [...], "validation": [...], "test": [...]}`` as `date_task`.

    Examples:
        >>> split = split_pairs([(str(i), str(i)) for i in range(40)], 10, 10)
        >>> [len(split[k]) for k in ("train", "validation", "test")]
        [34, 2, 4]
    """
    where = "split_pairs"
    validation_size = check_int(where, "validation_size", validation_size, minimum=1)
    test_size = check_int(where, "test_size", test_size, minimum=1)
    pairs = list(pairs)
    if len(pairs) < 3:
        raise invalid_value(where, "pairs", "at least 3 pairs", f"{len(pairs)} pairs")
    random.Random(check_int(where, "seed", seed)).shuffle(pairs)
    n_test = min(test_size, max(1, len(pairs) // 10))
    n_validation = min(validation_size, max(1, len(pairs) // 20))
    return {
        "train": pairs[n_test + n_validation :],
        "validation": pairs[n_test : n_test + n_validation],
        "test": pairs[:n_test],
    }


def make_dataset(
    pairs: Sequence[tuple[str, str]],
    source_tokenizer: CharTokenizer | WordPieceTokenizer,
    target_tokenizer: CharTokenizer | WordPieceTokenizer,
    batch_size: int,
    source_length: int,
    target_length: int,
    shuffle_seed: int | None = None,
    bucket_lengths: Sequence[int] | None = None,
    epochs: int | None = None,
    first_epoch: int = 0,
) -> tf.data.Dataset:
    """Builds the teacher-forcing `tf.data` pipeline; tokenization runs in the graph.

    For a target with ids t_1..t_n (truncated to `target_length - 1`):

        decoder_inputs = [START] t_1 .. t_n  [PAD]...
        targets        = t_1 .. t_n  [END]   [PAD]...

    so `targets[:, i]` is what the decoder must predict after reading
    `decoder_inputs[:, : i + 1]`.

    Args:
        pairs: `(source, target)` strings.
        source_tokenizer: a `keras_seq.text` tokenizer for the sources.
        target_tokenizer: a `keras_seq.text` tokenizer for the targets.
        batch_size: examples per batch (the last batch may be smaller).
        source_length: length `Ts` of `encoder_inputs` (truncated, padded with 0).
        target_length: length `Tt` of `decoder_inputs` and `targets`.
        shuffle_seed: `None` keeps the order of `pairs`; an int shuffles all
            pairs with that seed, anew each epoch.
        bucket_lengths: optional increasing source lengths below
            `source_length`, e.g. `(10, 16, 24)`. Each batch then holds pairs
            whose tokenized source fits the same bucket (<= 10, <= 16, <= 24,
            the rest) and `encoder_inputs` is padded only to that bucket's
            length (`source_length` for the last), so short sources do not pay
            for the longest one. Without ``epochs``, batches come from a
            window of the (shuffled) stream per bucket and a bucket's last
            batch may be smaller. With ``epochs``, each bucket's pairs are cut
            into full batches in the epoch's shuffled order, the fewer than
            ``batch_size`` pairs left over in each bucket are batched together
            (padded to the bucket of their longest source), and the epoch's
            batches are shuffled: every batch but one is full, so a compiled
            training step sees one batch shape per bucket, plus one.
        epochs: with ``shuffle_seed``, the dataset holds epochs
            ``first_epoch .. epochs - 1`` back to back (iterate it once, with
            ``fit(steps_per_epoch=...)``), and the order of epoch ``e`` depends
            only on ``(shuffle_seed, e)``: a run resumed at epoch ``e`` in a new
            process sees the batches an uninterrupted run sees. None: one epoch
            that ``shuffle`` reorders anew each time it is iterated (an order
            that depends on how often the dataset was iterated in this process).
        first_epoch: the first epoch the dataset holds (with ``epochs``).

    Returns:
        A dataset of `({"encoder_inputs": int32 (B, Ts), "decoder_inputs":
        int32 (B, Tt)}, targets int32 (B, Tt))`.

    Examples:
        >>> from keras_seq import text
        >>> pairs = [("21 Nov 2026", "2026-11-21")]
        >>> source = text.CharTokenizer.from_corpus(s for s, _ in pairs)
        >>> target = text.CharTokenizer.from_corpus(t for _, t in pairs)
        >>> inputs, targets = next(iter(make_dataset(pairs, source, target, 1, 16, 12)))
        >>> tuple(targets.shape)
        (1, 12)
    """
    where = "make_dataset"
    batch_size = check_int(where, "batch_size", batch_size, minimum=1)
    source_length = check_int(where, "source_length", source_length, minimum=1)
    # [START] or [END] and at least one token.
    target_length = check_int(where, "target_length", target_length, minimum=2)
    shuffle_seed = check_int(where, "shuffle_seed", shuffle_seed, allow_none=True)
    epochs = check_int(where, "epochs", epochs, minimum=1, allow_none=True)
    first_epoch = check_int(
        where, "first_epoch", first_epoch, minimum=0, maximum=None if epochs is None else epochs - 1
    )
    if epochs is not None and shuffle_seed is None:
        raise ValueError("make_dataset: `epochs` needs a `shuffle_seed`; received shuffle_seed=None.")
    pairs = list(pairs)
    if not pairs:
        raise ValueError("make_dataset: `pairs` is empty.")
    for index, pair in enumerate(pairs):
        if len(pair) != 2 or not all(isinstance(s, str) for s in pair):
            raise ValueError(
                f"make_dataset: `pairs[{index}]` must be a (source, target) pair of str, received {pair!r}."
            )
    buckets = _check_buckets(bucket_lengths, source_length)
    sources = tf.constant([s for s, _ in pairs], dtype=tf.string)
    targets = tf.constant([t for _, t in pairs], dtype=tf.string)
    # Bucket i holds source lengths in (pads[i - 1], pads[i]]; the last runs to
    # source_length (longer sources are truncated by encode).
    pads = tf.constant([*buckets, source_length], tf.int32)

    # The map functions below have no Python control flow on tensors, so
    # AutoGraph is off for them: converting `encode` and the tokenizer code it
    # calls took about 3 of the 4.5 s that building the date task's datasets
    # took (benchmarks/RESULTS.md).
    @tf.autograph.experimental.do_not_convert
    def encode(source, target, lengths=None):
        encoder_inputs = source_tokenizer.encode(source, source_length)
        if lengths is not None:
            # Padding is at the end, so cutting at the bucket's length loses nothing.
            bucket = tf.searchsorted(pads[:-1], tf.reduce_max(lengths)[None], side="left")[0]
            encoder_inputs = encoder_inputs[:, : tf.gather(pads, bucket)]
        decoder_inputs = target_tokenizer.encode(target, target_length, add_start=True)
        decoder_targets = target_tokenizer.encode(target, target_length, add_end=True)
        return (
            {"encoder_inputs": encoder_inputs, "decoder_inputs": decoder_inputs},
            decoder_targets,
        )

    columns = (sources, targets)
    # Batches per epoch (tf.data cannot tell; len() and Keras' progress bar need it).
    # With epochs, bucketed or not, all but the last batch are full.
    batches = -(-len(pairs) // batch_size)
    if buckets:
        columns += (tf.cast(source_tokenizer.tokenize(sources).row_lengths(), tf.int32),)
        bucket_of = np.searchsorted(buckets, columns[2].numpy(), side="left")
        if epochs is None:  # every bucket ends with one partial batch at most
            batches = int(sum(-(-int(n) // batch_size) for n in np.bincount(bucket_of)))

    def batch(dataset):
        # Batch before tokenizing: one vectorised tokenizer call per batch, not per pair.
        if not buckets:
            return dataset.batch(batch_size)
        return dataset.bucket_by_sequence_length(
            lambda source, target, length: length,
            bucket_boundaries=[b + 1 for b in buckets],  # bucket i: length < buckets[i] + 1
            bucket_batch_sizes=[batch_size] * (len(buckets) + 1),
        )

    if epochs is None:
        dataset = tf.data.Dataset.from_tensor_slices(columns)
        if shuffle_seed is not None:
            dataset = dataset.shuffle(len(pairs), seed=shuffle_seed, reshuffle_each_iteration=True)
        dataset = batch(dataset)
        count = batches
    else:
        # One explicit permutation per epoch, drawn from (seed, epoch) alone.
        orders = np.stack([
            np.random.default_rng([shuffle_seed, epoch]).permutation(len(pairs))
            for epoch in range(first_epoch, epochs)
        ]).astype("int32")

        @tf.autograph.experimental.do_not_convert
        def gather(i):
            return tuple(tf.gather(column, i) for column in columns)

        def one_epoch(order):
            order = tf.data.Dataset.from_tensor_slices(order)
            return order.batch(batch_size).map(gather)  # one gather per batch

        if buckets:
            # Index rows of every batch of every epoch, -1 where a batch is short.
            rows = np.concatenate([
                _bucketed_batches(order, bucket_of[order], batch_size,
                                  np.random.default_rng([shuffle_seed, epoch, 1]))
                for epoch, order in zip(range(first_epoch, epochs), orders)
            ])

            @tf.autograph.experimental.do_not_convert
            def gather_row(row):
                return gather(tf.boolean_mask(row, row >= 0))

            dataset = tf.data.Dataset.from_tensor_slices(rows).map(gather_row)
        else:
            dataset = tf.data.Dataset.from_tensor_slices(orders).flat_map(one_epoch)
        count = batches * (epochs - first_epoch)
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(count))
    dataset = dataset.map(encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.prefetch(tf.data.AUTOTUNE)


def _bucketed_batches(order, bucket_of, batch_size, rng):
    """One epoch's batches with buckets (see `make_dataset`): ``(batches, batch_size)``
    indices into the pairs, -1 after the last index of a short batch.

    ``order`` is the epoch's permutation of the pairs, ``bucket_of`` the
    bucket of each pair in that order; ``rng`` shuffles the batches.
    """
    batches, rest = [], []
    for bucket in np.unique(bucket_of):
        members = order[bucket_of == bucket]
        cut = len(members) - len(members) % batch_size
        batches += list(members[:cut].reshape(-1, batch_size))
        rest.append(members[cut:])
    rest = np.concatenate(rest)
    batches += [rest[i : i + batch_size] for i in range(0, len(rest), batch_size)]
    rows = np.full((len(batches), batch_size), -1, np.int32)
    for row, batch in zip(rows, (batches[i] for i in rng.permutation(len(batches)))):
        row[: len(batch)] = batch
    return rows


def _check_buckets(bucket_lengths, source_length) -> tuple[int, ...]:
    if bucket_lengths is None:
        return ()
    expected = f"strictly increasing integers in [1, source_length={source_length})"
    buckets = tuple(bucket_lengths)
    for b in buckets:
        check_int("make_dataset", "bucket_lengths", b, minimum=1, maximum=source_length - 1)
    if list(buckets) != sorted(set(buckets)):
        raise invalid_value("make_dataset", "bucket_lengths", expected, bucket_lengths)
    return tuple(int(b) for b in buckets)


# ---------------------------------------------------------------------------
# Text for character language models

TINY_SHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
HELD_OUT_FRACTION = 0.1


def tiny_shakespeare(
    cache_dir: str | os.PathLike | None = None,
    origin: str = TINY_SHAKESPEARE_URL,
    sha256: str = TINY_SHAKESPEARE_SHA256,
) -> str:
    """The path of tiny Shakespeare (1,115,394 characters), downloaded once.

    `keras.utils.get_file` keeps the file in ``cache_dir/datasets/`` (default
    ``~/.keras/datasets/``) and downloads it only when it is missing or its
    SHA-256 differs from ``sha256``; a download whose hash differs is an error.

    Args:
        cache_dir: the cache folder; None: Keras' default.
        origin: the URL (any scheme `urllib` reads, ``file://`` included).
        sha256: the expected SHA-256 of the file, as hex.

    Raises:
        ValueError: the downloaded file does not have that hash.

    References:
        Karpathy. char-rnn, ``data/tinyshakespeare/input.txt``. 2015.
    """
    import keras

    return keras.utils.get_file(
        "tinyshakespeare.txt",
        origin=origin,
        file_hash=sha256,
        hash_algorithm="sha256",
        cache_dir=None if cache_dir is None else os.fspath(cache_dir),
    )


def load_text(path: str | os.PathLike) -> str:
    """The whole of a UTF-8 text file (a leading byte-order mark is dropped).

    Raises:
        ValueError: naming the file, when it is not UTF-8 or has fewer than
            2 characters.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not valid UTF-8 ({error}).") from None
    if len(text) < 2:
        raise ValueError(f"{path}: a language model needs at least 2 characters, found {len(text)}.")
    return text


def split_text(text: str, held_out_fraction: float = HELD_OUT_FRACTION) -> tuple[str, str]:
    """``(train, held_out)``: the text cut at ``int(len(text) * (1 - held_out_fraction))``.

    The held-out part is the end of the text, as in nanoGPT's character
    Shakespeare (its first 90% train, the last 10% validate).

    Examples:
        >>> split_text("abcdefghij")
        ('abcdefghi', 'j')
    """
    fraction = check_float("split_text", "held_out_fraction", held_out_fraction,
                           low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
    cut = int(len(text) * (1.0 - fraction))
    return text[:cut], text[cut:]


def text_windows(ids, context: int) -> tuple[np.ndarray, np.ndarray]:
    """Consecutive windows of ``context + 1`` ids that predict every id but the first once.

    Window k covers ``ids[k·context : k·context + context + 1]``: its first
    ``context`` ids are the inputs and its last ``context`` the targets, so
    consecutive windows share one id and target ``ids[j]`` (j ≥ 1) is
    predicted from ``ids[k·context : j]`` with k = ⌊(j − 1) / context⌋, the
    preceding ids of its window (1 to ``context`` of them). The last window
    may be shorter; its inputs and targets are padded with 0.

    Args:
        ids: ``(N,)`` integer ids, N ≥ 2, none of them 0.
        context: int, the model's training length.

    Returns:
        ``(inputs, targets)``, two ``(⌈(N − 1) / context⌉, context)`` int32
        arrays; the targets hold N − 1 nonzero ids.

    Examples:
        >>> inputs, targets = text_windows([5, 6, 7, 8, 9], context=3)
        >>> inputs.tolist(), targets.tolist()
        ([[5, 6, 7], [8, 0, 0]], [[6, 7, 8], [9, 0, 0]])
    """
    context = check_int("text_windows", "context", context, minimum=1)
    ids = np.asarray(ids, dtype=np.int32).reshape(-1)
    if ids.size < 2:
        raise invalid_value("text_windows", "ids", "at least 2 ids", f"{ids.size} ids")
    count = -(-(ids.size - 1) // context)
    padded = np.zeros(count * context + 1, np.int32)
    padded[: ids.size] = ids
    starts = np.arange(count)[:, None] * context + np.arange(context)[None, :]
    targets = padded[starts + 1]
    # An input whose target is padding predicts nothing: pad it too.
    return np.where(targets != 0, padded[starts], 0), targets


def make_text_dataset(
    ids,
    batch_size: int,
    context: int,
    steps_per_epoch: int,
    seed: int,
    epochs: int,
    first_epoch: int = 0,
) -> tf.data.Dataset:
    """Batches of random windows of a text, for next-character prediction.

    Each example is a window of ``context + 1`` consecutive ids starting at
    a uniformly drawn offset (as nanoGPT samples its batches):
    ``inputs = ids[o : o + context]``, ``targets = ids[o + 1 : o + context + 1]``.
    An epoch is ``steps_per_epoch`` batches, not a pass over the text; the
    offsets of epoch ``e`` depend only on ``(seed, e)``, so a run resumed at
    epoch ``e`` sees the batches an uninterrupted run sees.

    Args:
        ids: ``(N,)`` integer ids, N > ``context``.
        batch_size: int, windows per batch.
        context: int, window length (inputs and targets).
        steps_per_epoch: int, batches per epoch.
        seed: int, seed of the offsets.
        epochs: int, the dataset holds epochs ``first_epoch .. epochs - 1``
            back to back.
        first_epoch: int, the first of them.

    Returns:
        A dataset of ``(inputs, targets)``, both int32 ``(batch_size, context)``.

    Examples:
        >>> inputs, targets = next(iter(make_text_dataset(
        ...     list(range(4, 40)), batch_size=2, context=5, steps_per_epoch=3, seed=0, epochs=1)))
        >>> bool((inputs[:, 1:] == targets[:, :-1]).numpy().all())
        True
    """
    where = "make_text_dataset"
    batch_size = check_int(where, "batch_size", batch_size, minimum=1)
    context = check_int(where, "context", context, minimum=1)
    steps_per_epoch = check_int(where, "steps_per_epoch", steps_per_epoch, minimum=1)
    seed = check_int(where, "seed", seed)
    epochs = check_int(where, "epochs", epochs, minimum=1)
    first_epoch = check_int(where, "first_epoch", first_epoch, minimum=0, maximum=epochs - 1)
    ids = np.asarray(ids, dtype=np.int32).reshape(-1)
    if ids.size <= context:
        raise invalid_value(
            where, "ids", f"more than context={context} ids", f"{ids.size} ids"
        )
    offsets = np.stack([
        np.random.default_rng([seed, epoch]).integers(
            0, ids.size - context, size=steps_per_epoch * batch_size
        )
        for epoch in range(first_epoch, epochs)
    ]).reshape(-1, batch_size).astype("int32")  # one row per batch
    text = tf.constant(ids)
    positions = tf.range(context + 1)

    @tf.autograph.experimental.do_not_convert
    def windows(o):
        w = tf.gather(text, o[:, None] + positions[None, :])  # (B, context + 1)
        return w[:, :-1], w[:, 1:]

    dataset = tf.data.Dataset.from_tensor_slices(offsets).map(windows)
    return dataset.prefetch(tf.data.AUTOTUNE)

# The algorithmic tasks of the Neural Turing Machine (Graves et al. 2014, section 4)
#
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
