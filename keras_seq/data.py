"""Data: the embedded date-normalisation task, a TSV loader, text for language
models and the tf.data pipelines.

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
"""

from __future__ import annotations

import datetime
import os
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf

from keras_seq._validation import check_float, check_int, invalid_value

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

    Example:

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

    Example:

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
            for the longest one. Batches come from a window of the (shuffled)
            stream per bucket; a bucket's last batch may be smaller.
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

    Example:

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
    if buckets:
        columns += (tf.cast(source_tokenizer.tokenize(sources).row_lengths(), tf.int32),)
        # Every bucket ends with one partial batch at most: an epoch has this
        # many batches (tf.data cannot tell, and len() and Keras' progress bar need it).
        sizes = np.bincount(np.searchsorted(buckets, columns[2].numpy(), side="left"))
        batches = int(sum(-(-int(n) // batch_size) for n in sizes))
    else:
        batches = -(-len(pairs) // batch_size)

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

        def gather(i):
            return tuple(tf.gather(column, i) for column in columns)

        def one_epoch(order):
            order = tf.data.Dataset.from_tensor_slices(order)
            if buckets:
                return batch(order.map(gather))
            return order.batch(batch_size).map(gather)  # one gather per batch

        dataset = tf.data.Dataset.from_tensor_slices(orders).flat_map(one_epoch)
        count = batches * (epochs - first_epoch)
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(count))
    dataset = dataset.map(encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.prefetch(tf.data.AUTOTUNE)


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

    Example:

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

    Example:

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

    Example:

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

    def windows(o):
        w = tf.gather(text, o[:, None] + positions[None, :])  # (B, context + 1)
        return w[:, :-1], w[:, 1:]

    dataset = tf.data.Dataset.from_tensor_slices(offsets).map(windows)
    return dataset.prefetch(tf.data.AUTOTUNE)
