"""The `tf.data` pipelines: teacher forcing for sequence-to-sequence pairs
(`make_dataset`, with optional length bucketing), labelled texts for
classifiers (`make_classification_dataset`) and random windows of a text for
language models (`make_text_dataset`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf

from keras_seq._validation import (
    ArgumentValueError,
    check_int,
    invalid_value,
)

if TYPE_CHECKING:
    from keras_seq.text import CharTokenizer, WordPieceTokenizer

__all__ = ["classification_ids", "data_sharding", "make_classification_dataset", "make_dataset",
           "make_text_dataset"]

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
    shuffle_seed, epochs, first_epoch = _check_epochs(where, shuffle_seed, epochs, first_epoch)
    pairs = list(pairs)
    if not pairs:
        raise ArgumentValueError('make_dataset', '`pairs` is empty.')
    for index, pair in enumerate(pairs):
        if len(pair) != 2 or not all(isinstance(s, str) for s in pair):
            raise ArgumentValueError('make_dataset', f'`pairs[{index}]` must be a (source, target) pair of str, received {pair!r}.')
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
        orders = _epoch_orders(len(pairs), shuffle_seed, first_epoch, epochs)

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


def _check_epochs(where, shuffle_seed, epochs, first_epoch):
    """``(shuffle_seed, epochs, first_epoch)`` checked: ``epochs`` needs a seed."""
    shuffle_seed = check_int(where, "shuffle_seed", shuffle_seed, allow_none=True)
    epochs = check_int(where, "epochs", epochs, minimum=1, allow_none=True)
    first_epoch = check_int(
        where, "first_epoch", first_epoch, minimum=0, maximum=None if epochs is None else epochs - 1
    )
    if epochs is not None and shuffle_seed is None:
        raise ArgumentValueError(where, '`epochs` needs a `shuffle_seed`; received shuffle_seed=None.')
    return shuffle_seed, epochs, first_epoch


def _epoch_orders(count: int, seed: int, first_epoch: int, epochs: int) -> np.ndarray:
    """``(epochs - first_epoch, count)`` int32: one permutation per epoch, drawn
    from ``(seed, epoch)`` alone, so that a resumed run sees the same orders."""
    return np.stack([
        np.random.default_rng([seed, epoch]).permutation(count)
        for epoch in range(first_epoch, epochs)
    ]).astype("int32")


def classification_ids(tokenizer, texts, max_length: int) -> tf.Tensor:
    """A classifier's input: each text's first ``max_length`` token ids, padded
    with 0 to the longest (at least one position, so that an empty text is a
    row of padding). Made of TensorFlow ops only: the same in a dataset, in
    eager code and in a SavedModel.

    Args:
        tokenizer: a `keras_seq.text` tokenizer.
        texts: a ``(B,)`` string tensor or a list of str.
        max_length: int, the most tokens kept of a text.

    Returns:
        int32 ``(B, T)``, T ≤ ``max_length``.

    Examples:
        >>> from keras_seq import text
        >>> tokenizer = text.CharTokenizer.from_corpus(["abc"])
        >>> classification_ids(tokenizer, ["abcab", "", "b"], 4).numpy().tolist()
        [[4, 5, 6, 4], [0, 0, 0, 0], [5, 0, 0, 0]]
    """
    ids = tokenizer.tokenize(texts)[:, :max_length]
    width = tf.maximum(tf.cast(ids.bounding_shape(axis=1), tf.int32), 1)
    return ids.to_tensor(shape=tf.stack([tf.cast(ids.nrows(), tf.int32), width]))


def make_classification_dataset(
    texts: Sequence[str],
    labels: Sequence[int],
    tokenizer: CharTokenizer | WordPieceTokenizer,
    batch_size: int,
    max_length: int,
    shuffle_seed: int | None = None,
    epochs: int | None = None,
    first_epoch: int = 0,
    class_weights: Sequence[float] | None = None,
    next_token_targets: bool = False,
) -> tf.data.Dataset:
    """Batches of tokenized texts and their class ids; tokenization runs in the graph.

    Each batch's ids are its texts' first ``max_length`` tokens, padded with 0
    to the longest of the batch (`classification_ids`; not to ``max_length``:
    short texts cost less).

    Args:
        texts: the texts.
        labels: one class id per text, in ``[0, number of classes)``.
        tokenizer: a `keras_seq.text` tokenizer.
        batch_size: texts per batch (the last batch may be smaller).
        max_length: the most tokens kept of a text (its beginning).
        shuffle_seed: None keeps the order of ``texts``; an int shuffles them.
        epochs: with ``shuffle_seed``, the dataset holds epochs ``first_epoch ..
            epochs - 1`` back to back, each in an order that depends only on
            ``(shuffle_seed, epoch)`` (as `make_dataset`'s ``epochs``).
        first_epoch: the first epoch the dataset holds (with ``epochs``).
        class_weights: one weight per class id: each batch also carries the
            sample weights ``class_weights[label]`` (Keras' ``class_weight``,
            as sample weights, which multi-output models take too).
        next_token_targets: the targets are ``{"classes": labels,
            "next_tokens": ids}`` where ``next_tokens[:, t]`` is the id at
            t + 1 (0 after the last token): the targets of a language model's
            head on the same text (`models.classifier_from_language_model`
            with ``lm_logits=True``).

    Returns:
        A dataset of ``(ids int32 (B, T), targets)`` or, with
        ``class_weights``, ``(ids, targets, sample_weights)`` (a dict like the
        targets with ``next_token_targets``, the next-token weights all ones).

    Examples:
        >>> from keras_seq import text
        >>> tokenizer = text.CharTokenizer.from_corpus(["abc", "a"])
        >>> ids, labels = next(iter(make_classification_dataset(
        ...     ["abc", "a"], [1, 0], tokenizer, batch_size=2, max_length=8)))
        >>> ids.numpy().tolist(), labels.numpy().tolist()
        ([[4, 5, 6], [4, 0, 0]], [1, 0])
    """
    where = "make_classification_dataset"
    batch_size = check_int(where, "batch_size", batch_size, minimum=1)
    max_length = check_int(where, "max_length", max_length, minimum=1)
    shuffle_seed, epochs, first_epoch = _check_epochs(where, shuffle_seed, epochs, first_epoch)
    texts, labels = list(texts), np.asarray(labels)
    if not texts or len(texts) != len(labels):
        raise invalid_value(where, "labels", f"one class id per text ({len(texts)} texts)",
                            f"{len(labels)} labels")
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
        raise invalid_value(where, "labels", "non-negative integer class ids", labels[:5])
    columns = [tf.constant(texts, tf.string), tf.constant(labels, tf.int32)]
    if class_weights is not None:
        class_weights = np.asarray(class_weights, np.float32)
        if class_weights.ndim != 1 or len(class_weights) <= labels.max():
            raise invalid_value(where, "class_weights", f"one weight per class id "
                                f"(at least {labels.max() + 1})", class_weights)
        columns.append(tf.constant(class_weights[labels]))

    @tf.autograph.experimental.do_not_convert
    def encode(*batch):
        ids = classification_ids(tokenizer, batch[0], max_length)
        targets = batch[1]
        if next_token_targets:
            following = tf.pad(ids[:, 1:], [[0, 0], [0, 1]])
            targets = {"classes": targets, "next_tokens": following}
        if class_weights is None:
            return ids, targets
        weights = batch[2]
        if next_token_targets:
            weights = {"classes": weights, "next_tokens": tf.ones(tf.shape(ids), tf.float32)}
        return ids, targets, weights

    @tf.autograph.experimental.do_not_convert
    def gather(order):
        return tuple(tf.gather(column, order) for column in columns)

    batches = -(-len(texts) // batch_size)
    if epochs is None:
        dataset = tf.data.Dataset.from_tensor_slices(tuple(columns))
        if shuffle_seed is not None:
            dataset = dataset.shuffle(len(texts), seed=shuffle_seed, reshuffle_each_iteration=True)
        dataset = dataset.batch(batch_size)
    else:
        orders = _epoch_orders(len(texts), shuffle_seed, first_epoch, epochs)
        dataset = tf.data.Dataset.from_tensor_slices(orders).flat_map(
            lambda order: tf.data.Dataset.from_tensor_slices(order).batch(batch_size).map(gather)
        )
        batches *= epochs - first_epoch
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
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


def data_sharding():
    """DATA auto-sharding: the pipeline reads in-memory tensors (nothing to
    shard by file), and every worker keeps its slice of each global batch, so
    the global batches, and the weights, are those of a one-device run."""
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return options
