"""The data of a run: read and checked in Python (`keras_seq.run_data.load_data`,
re-exported here), then tokenized into `tf.data` pipelines (`prepare_data`);
a fine-tuning run's options are completed from its language model's run
folder first (`with_language_model`)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from keras_seq.run_config import TEXT_TASKS, TrainingConfig
from keras_seq.run_data import load_data, load_labelled, load_pairs

__all__ = [
    "PreparedData",
    "PreparedLabels",
    "PreparedText",
    "data_sharding",
    "length_buckets",
    "load_data",
    "load_labelled",
    "load_pairs",
    "prepare_data",
    "with_language_model",
]


@dataclasses.dataclass
class PreparedData:
    """What `prepare_data` returns: the splits, the tokenizer and the datasets.

    Attributes:
        train_pairs, validation_pairs, test_pairs: ``(source, target)`` strings.
        tokenizer: the `keras_seq.text.CharTokenizer` of the training pairs
            (sources and targets share it).
        source_length, target_length: padded lengths of the model's inputs.
        train_data, validation_data: `keras_seq.data.make_dataset` datasets;
            the training one reshuffles each epoch with ``config.seed`` (for
            `fit` over all epochs at once; `train` uses `epochs_data`).
        batch_size, seed: the config's, for `epochs_data`.
        bucket_lengths: the training batches' source-length buckets (empty:
            none), see `length_buckets`.
    """

    train_pairs: list
    validation_pairs: list
    test_pairs: list
    tokenizer: Any
    source_length: int
    target_length: int
    train_data: Any
    validation_data: Any
    batch_size: int
    seed: int
    bucket_lengths: tuple = ()

    @property
    def steps_per_epoch(self) -> int:
        """Batches in an epoch (a pass over the training pairs)."""
        return -(-len(self.train_pairs) // self.batch_size)

    def epochs_data(self, first_epoch: int, epochs: int, skip: int = 0):
        """The training batches of epochs ``first_epoch .. epochs - 1``, ``skip`` batches
        dropped: each epoch's order depends only on the seed and the epoch number,
        so a resumed run sees the batches an uninterrupted one sees."""
        from keras_seq import data

        batches = data.make_dataset(
            self.train_pairs, self.tokenizer, self.tokenizer, self.batch_size,
            self.source_length, self.target_length, shuffle_seed=self.seed,
            first_epoch=first_epoch, epochs=epochs, bucket_lengths=self.bucket_lengths or None,
        )
        return batches.skip(skip).with_options(data_sharding())


def data_sharding():
    """DATA auto-sharding: the pipeline reads in-memory tensors (nothing to
    shard by file), and every worker keeps its slice of each global batch, so
    the global batches, and the weights, are those of a one-device run."""
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return options


@dataclasses.dataclass
class PreparedText:
    """What `prepare_data` returns for ``task="lm"``: the text, split and tokenized.

    Attributes:
        train_ids, held_out_ids: ``(N,)`` int32 ids of the first 90% and the
            last 10% of the text (`keras_seq.data.split_text`).
        tokenizer: the `keras_seq.text.CharTokenizer` of every character of
            the text, or (``tokenizer="wordpiece"``) the
            `keras_seq.text.WordPieceTokenizer` learned from the first 90%.
        context: the window length.
        validation_data: ``validation_size`` held-out windows
            (`keras_seq.data.text_windows`), evenly spread, in batches.
        batch_size, seed, steps_per_epoch: the config's, for `epochs_data`.
        source: the file the text was read from.
        held_out_text: the last 10% of the text (what ``held_out_ids`` encode).
        bidirectional: ``task="bilm"``: the targets are ``{"forward": next
            ids, "backward": previous ids}`` (`bidirectional_targets`).
        train_characters: characters of the first 90% of the text.
    """

    train_ids: Any
    held_out_ids: Any
    tokenizer: Any
    context: int
    validation_data: Any
    batch_size: int
    seed: int
    steps_per_epoch: int
    source: str
    held_out_text: str = ""
    bidirectional: bool = False
    train_characters: int = 0

    def epochs_data(self, first_epoch: int, epochs: int, skip: int = 0):
        """The training batches of epochs ``first_epoch .. epochs - 1``, ``skip``
        batches dropped (`keras_seq.data.make_text_dataset`)."""
        from keras_seq import data

        batches = data.make_text_dataset(
            self.train_ids, self.batch_size, self.context, self.steps_per_epoch, self.seed,
            epochs=epochs, first_epoch=first_epoch,
        )
        if self.bidirectional:
            batches = batches.map(bidirectional_targets)
        return batches.skip(skip).with_options(data_sharding())


def bidirectional_targets(inputs, targets):
    """``(inputs, {"forward": targets, "backward": previous})`` of a batch of
    text windows: at t the forward target is id t + 1 (``targets``), the
    backward one id t − 1 of the window (0, not scored, at t = 0 and at
    padding)."""
    import tensorflow as tf

    previous = tf.pad(inputs[:, :-1], [[0, 0], [1, 0]])
    previous = tf.where(tf.not_equal(inputs, 0), previous, tf.zeros_like(previous))
    return inputs, {"forward": targets, "backward": previous}


def _prepare_text(config: TrainingConfig, loaded: tuple | None = None) -> PreparedText:
    import numpy as np
    import tensorflow as tf

    from keras_seq import data, text

    source, train_text, held_out_text = loaded or load_data(config)
    if config.tokenizer == "wordpiece":
        tokenizer = _learn_wordpiece(config, source, [train_text], keep_newlines=True)
    else:
        tokenizer = text.CharTokenizer.from_corpus([train_text + held_out_text])
    # One string each: the WordPiece tokenizer cuts at newlines itself, so this
    # equals tokenizing line by line and joining with the newline id.
    train_ids, held_out_ids = (
        tokenizer.tokenize([part]).flat_values.numpy().astype(np.int32)
        for part in (train_text, held_out_text)
    )
    if len(train_ids) <= config.context or len(held_out_ids) < 2:
        # The character count was checked by `load_data`; tokens are fewer.
        raise ValueError(
            f"train: {source} makes {len(train_ids)} {config.tokenizer} tokens in its first 90% and "
            f"{len(held_out_ids)} in its last 10%; task {config.task!r} with "
            f"context={config.context} needs more than {config.context} tokens in the first "
            "and at least 2 in the last (a longer text, or a smaller --context)."
        )
    inputs, targets = data.text_windows(held_out_ids, config.context)
    chosen = np.unique(np.linspace(0, len(inputs) - 1, config.validation_size).round().astype(int))
    validation_data = tf.data.Dataset.from_tensor_slices(
        (inputs[chosen], targets[chosen])
    ).batch(config.batch_size)
    bidirectional = config.task == "bilm"
    if bidirectional:
        validation_data = validation_data.map(bidirectional_targets)
    return PreparedText(
        train_ids, held_out_ids, tokenizer, config.context,
        validation_data.with_options(data_sharding()),
        config.batch_size, config.seed, config.steps_per_epoch, source, held_out_text,
        bidirectional, len(train_text),
    )


def _learn_wordpiece(config: TrainingConfig, source: str, train_texts: list[str],
                     keep_newlines: bool = False):
    """The WordPiece tokenizer of a run, learned from its training text only:
    the held-out text plays no part in the model, its vocabulary included
    (a held-out word the pieces cannot spell is one ``[UNK]``)."""
    from keras_seq import text

    tokenizer = text.WordPieceTokenizer.from_corpus(
        train_texts, vocab_size=config.vocab_size, keep_newlines=keep_newlines
    )
    if tokenizer.vocabulary_size > config.vocab_size:
        raise ValueError(
            f"train: the WordPiece vocabulary of {source} needs at least "
            f"{tokenizer.vocabulary_size} tokens (every character of the text as a word start "
            f"and as a ## suffix, the reserved tokens and the newline); vocab_size="
            f"{config.vocab_size} is smaller (--vocab-size)."
        )
    return tokenizer


@dataclasses.dataclass
class PreparedLabels:
    """What `prepare_data` returns for ``task="classify"``.

    Attributes:
        train_examples, validation_examples, test_examples: ``(label, text)``
            lists (`load_labelled`).
        labels: the class names, sorted; class id i is ``labels[i]``.
        tokenizer: learned from the training texts (characters or WordPiece),
            or the language model's (``init_from``).
        source_length: the most tokens read of a text (``max_source_length``).
        class_weights: ``(classes,)`` weights of ``class_weight="balanced"``, or None.
        next_token_targets: the targets include the next tokens (``lm_weight`` > 0).
        validation_data: the validation batches, in order.
        truncated: texts per split longer than ``source_length`` tokens (read cut).
        unknown_tokens: ``[UNK]`` tokens in the training texts.
        batch_size, seed: the config's, for `epochs_data`.
    """

    train_examples: list
    validation_examples: list
    test_examples: list
    labels: list
    tokenizer: Any
    source_length: int
    class_weights: Any
    next_token_targets: bool
    validation_data: Any
    truncated: dict
    unknown_tokens: int
    batch_size: int
    seed: int

    @property
    def steps_per_epoch(self) -> int:
        """Batches in an epoch (a pass over the training texts)."""
        return -(-len(self.train_examples) // self.batch_size)

    def class_ids(self, examples) -> list[int]:
        """The class id of each ``(label, text)``."""
        index = {label: i for i, label in enumerate(self.labels)}
        return [index[label] for label, _ in examples]

    def class_counts(self, examples) -> list[int]:
        """Texts per class id among ``examples``."""
        counts = [0] * len(self.labels)
        for i in self.class_ids(examples):
            counts[i] += 1
        return counts

    def dataset(self, examples, batch_size: int | None = None, **options):
        """`keras_seq.data.make_classification_dataset` of ``examples`` with
        this run's tokenizer, lengths, targets and (by default) batch size."""
        from keras_seq import data

        return data.make_classification_dataset(
            [t for _, t in examples], self.class_ids(examples), self.tokenizer,
            batch_size or self.batch_size, self.source_length,
            next_token_targets=self.next_token_targets, **options,
        ).with_options(data_sharding())

    def validation_batches(self, replicas: int = 1):
        """The validation batches, the first one a multiple of ``replicas`` texts.

        Keras 3.15's ``evaluate`` under a distribution strategy averages its
        first batch over the replicas (to build the model), which fails when
        they hold different numbers of rows; later batches may be uneven.
        """
        count = len(self.validation_examples)
        if count >= self.batch_size or count % replicas == 0:
            return self.dataset(self.validation_examples)
        if count < replicas:
            raise ValueError(
                f"train: the validation split has {count} text(s), fewer than the {replicas} "
                "replicas of the strategy; give more labelled texts or fewer replicas."
            )
        return self.dataset(self.validation_examples, batch_size=count - count % replicas)

    def epochs_data(self, first_epoch: int, epochs: int, skip: int = 0):
        """The training batches of epochs ``first_epoch .. epochs - 1``, ``skip``
        batches dropped, each epoch's order drawn from the seed and its number."""
        return self.dataset(
            self.train_examples, shuffle_seed=self.seed, epochs=epochs, first_epoch=first_epoch,
            class_weights=self.class_weights,
        ).skip(skip)


def with_language_model(config: TrainingConfig) -> TrainingConfig:
    """``config`` with the ``model``, ``cell``, ``units`` and ``layers`` of its
    ``init_from`` language model filled in (unchanged without ``init_from``).

    Reads only the language model's ``metrics.json`` and ``tokenizer.json``,
    so that a mismatch stops the run before anything is built, and imports
    the modules of its user classes (`RunFolder.import_user_modules`).

    Raises:
        FileNotFoundError: ``init_from`` is not a run folder.
        UserModuleError: a module of the language model's user classes
            cannot be imported.
        ValueError: naming both runs: ``init_from`` is not a language model
            (``task="lm"``), or ``config`` asks for another model kind, cell,
            width, depth or tokenizer than the language model has.
    """
    import json

    from keras_seq.training.run_folder import read_run

    if config.init_from is None:
        return config
    target = os.path.join(config.out, config.name) if config.name else f"in {config.out}"
    lm = read_run(config.init_from, "train")
    if lm.config.get("task") != "lm":
        raise ValueError(
            f"train: --init-from {lm.path} is a {lm.config.get('task')!r} run, not a language "
            f"model (keras-seq train --task lm); the classify run {target} starts from one."
        )
    asked = {key: getattr(config, key) for key in ("model", "cell", "units", "layers")}
    has = {key: lm.config.get(key) for key in asked}
    if has["model"] != "rnn":
        has["cell"] = None  # a Transformer has none
    with open(os.path.join(lm.path, "tokenizer.json"), encoding="utf-8") as f:
        lm_tokenizer = json.load(f).get("type")
    if lm_tokenizer != config.tokenizer or config.vocab_size is not None:
        asked_tokenizer = {"tokenizer": config.tokenizer, "vocab_size": config.vocab_size}
        raise ValueError(
            f"train: the vocabulary of --init-from {lm.path} ({lm_tokenizer} tokens) does not "
            f"match the classify run {target} ({_described(asked_tokenizer)}); a fine-tuned "
            "classifier reads its language model's tokens: leave --tokenizer and --vocab-size "
            "out."
        )
    different = {k: v for k, v in asked.items() if v is not None and v != has[k]}
    if different:
        raise ValueError(
            f"train: --init-from {lm.path} is a language model with {_described(has)}; the "
            f"classify run {target} asks for {_described(different)}. A fine-tuned classifier "
            "has its language model's kind and sizes: leave those options out."
        )
    lm.import_user_modules()  # a user's cell: registers its name before the model is built
    return dataclasses.replace(config, **has)


def _described(options: dict) -> str:
    return ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in options.items() if v is not None)


def _prepare_labelled(config: TrainingConfig, loaded: tuple | None) -> PreparedLabels:
    import numpy as np

    from keras_seq import text
    from keras_seq.reserved_tokens import UNK_ID

    train, validation, test = loaded or load_labelled(config)
    texts = [t for _, t in train]
    if config.init_from is not None:
        tokenizer = text.load_tokenizer(config.init_from)
    elif config.tokenizer == "wordpiece":
        tokenizer = _learn_wordpiece(config, config.data, texts)
    else:
        tokenizer = text.CharTokenizer.from_corpus(texts)
    lengths = {part: tokenizer.tokenize([t for _, t in examples]).row_lengths().numpy()
               for part, examples in (("train", train), ("validation", validation),
                                      ("test", test))}
    # Batches are padded to their longest text only: a generous cap costs nothing.
    source_length = config.max_source_length
    labels = sorted({label for label, _ in train})
    counts = np.bincount([labels.index(label) for label, _ in train], minlength=len(labels))
    class_weights = None
    if config.class_weight == "balanced":
        class_weights = (len(train) / (len(labels) * counts)).astype(np.float32)
    unknown = int(np.sum(tokenizer.tokenize(texts).flat_values.numpy() == UNK_ID))
    prepared = PreparedLabels(
        train, validation, test, labels, tokenizer, source_length, class_weights,
        bool(config.lm_weight), None,
        {part: int(np.sum(n > source_length)) for part, n in lengths.items()},
        unknown, config.batch_size, config.seed,
    )
    prepared.validation_data = prepared.validation_batches()
    return prepared


def prepare_data(
    config: TrainingConfig, loaded: tuple | None = None
) -> PreparedData | PreparedText | PreparedLabels:
    """The data, tokenizer and datasets that `train` (and `tuning.search`) fit on.

    Args:
        config: a resolved `TrainingConfig` (`TrainingConfig.resolved`).
        loaded: what `load_data` returned for ``config``; None reads it.

    Returns:
        A `PreparedData` (translation tasks), a `PreparedText` (``task="lm"``)
        or a `PreparedLabels` (``task="classify"``).
    """
    from keras_seq import data, text

    if config.task == "classify":
        return _prepare_labelled(config, loaded)
    if config.task in TEXT_TASKS:
        return _prepare_text(config, loaded)

    train_pairs, validation_pairs, test_pairs = loaded or load_pairs(config)
    tokenizer = text.CharTokenizer.from_corpus(s for pair in train_pairs for s in pair)
    source_length = _max_length(tokenizer, (s for s, _ in train_pairs), 0, config.max_source_length)
    # +1 for [START]/[END]
    target_length = _max_length(tokenizer, (t for _, t in train_pairs), 1, config.max_target_length)
    buckets = length_buckets(source_length) if config.length_buckets else ()
    train_data, validation_data = (
        data.make_dataset(
            pairs, tokenizer, tokenizer, config.batch_size, source_length, target_length,
            shuffle_seed=config.seed if training else None,
            bucket_lengths=(buckets or None) if training else None,
        ).with_options(data_sharding())
        for pairs, training in ((train_pairs, True), (validation_pairs, False))
    )
    return PreparedData(
        train_pairs, validation_pairs, test_pairs, tokenizer, source_length, target_length,
        train_data, validation_data, config.batch_size, config.seed, buckets,
    )


def length_buckets(source_length: int) -> tuple[int, ...]:
    """Source-length buckets of the training batches: 8, 12, 18, 27, ... (×1.5,
    rounded up) below ``source_length``.

    Each bucket is one more batch shape, so one more compilation of the
    recurrent loops (about a second each on CPU); growing by half bounds the
    padding of a batch to about a third of its width.

    Examples:
        >>> length_buckets(31), length_buckets(64), length_buckets(8)
        ((8, 12, 18, 27), (8, 12, 18, 27, 41, 62), ())
    """
    buckets, bound = [], 8
    while bound < source_length:
        buckets.append(bound)
        bound = -(-3 * bound // 2)
    return tuple(buckets)


def _max_length(tokenizer, strings, extra, cap):
    lengths = tokenizer.tokenize(list(strings)).row_lengths()
    return int(min(cap, int(lengths.numpy().max()) + extra))
