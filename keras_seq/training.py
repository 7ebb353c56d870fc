"""The main job as a library function: train a model and write a run folder.

`train` is what ``keras-seq train`` runs; the command only parses its
arguments into a `TrainingConfig` and prints the result:

    >>> from keras_seq import training
    >>> result = training.train(training.TrainingConfig(  # doctest: +SKIP
    ...     train_size=2_000, epochs=1, out="runs", name="dates"))
    >>> result.metrics["test_exact_match"]  # doctest: +SKIP
    0.93

Three tasks (``task=``): ``"dates"`` (the default) and ``"translate"``
(``data=`` a TSV file) train a translation model; ``"lm"`` trains a
character language model (see *Language models* below).

The translation pipeline, one step a function: the pairs (`load_pairs`: the embedded date
task, or a shuffled split of a TSV file), a character tokenizer shared by
source and target, `tf.data` datasets, the model under a `tf.distribute`
strategy, Adam with warm-up and cosine decay on the padding-masked
cross-entropy, `fit`, greedy decoding of the test split, then the run folder:

- ``model.keras`` — the trained model (loads with ``safe_mode=True``);
- ``vocab.txt`` and ``tokenizer.json`` — the shared character vocabulary;
- ``logs/`` — TensorBoard logs;
- ``metrics.json`` — held-out exact-match accuracy (greedy decoding),
  timings and the full configuration;
- ``attention.png`` — attention heatmaps for a few test examples (models with
  attention);
- ``history.csv`` — one row per epoch: ``epoch``, ``step`` (training steps
  done), ``wall_seconds`` (since this `train` call started: data, model and
  training so far; a resumed run's rows restart from its own start),
  ``loss``, ``val_loss``, and for language models ``perplexity`` and
  ``val_perplexity``;
- ``backup/`` — only while the run trains: the training state after the
  last finished epoch (and every ``backup_every_steps`` steps).

**Language models** (``task="lm"``). The text (``data=`` a UTF-8 file, by
default tiny Shakespeare, `keras_seq.data.tiny_shakespeare`) is split as
nanoGPT splits it: the first 90% trains, the last 10% is held out
(`keras_seq.data.split_text`); a `keras_seq.text.CharTokenizer` holds every
character of the whole text. `models.language_model` trains on batches of
random windows of ``context`` characters (`keras_seq.data.make_text_dataset`),
an epoch being ``steps_per_epoch`` batches; after each epoch, the loss and
`keras_seq.metrics.Perplexity` are measured on ``validation_size`` held-out
windows spread evenly over the held-out text. At the end, ``metrics.json``
gets ``val_loss``, the mean cross-entropy in nats per character over the
whole held-out text, and ``val_perplexity`` = exp(``val_loss``): the held-out
text is cut into consecutive windows of ``context + 1`` characters that share
their first character with the previous window's last
(`keras_seq.data.text_windows`), so every held-out character but the first is
predicted exactly once, from the preceding characters of its window (1 to
``context`` of them), as in training (`text_loss`). The run folder holds
``model.keras``, the tokenizer files, ``logs/``, ``history.csv`` and
``metrics.json`` (no ``attention.png``); `generate_text` samples from it
(``keras-seq generate``).

**Resuming.** A run killed at any moment (SIGKILL included) and started again
with the same configuration resumes from its backup: it prints ``Resuming from
epoch k``, does not redo finished epochs or steps, and ends with the weights of
an uninterrupted run. The backup holds the weights, the optimizer's variables
(its step counter drives the learning-rate schedule) and the dropout seed
states; the data order of epoch ``e`` is a function of ``(seed, e)``
(`keras_seq.data.make_dataset` with ``epochs=``). Each backup is written to new
files and then published by an atomic rename of ``backup/state.json``, so a kill
during a write leaves the previous backup intact. Without ``name``, the newest
run folder of the same model family in ``out`` whose backup was written by the
same configuration is resumed. A run folder that already holds a finished run
(``metrics.json`` and no backup) is not trained again: `train` raises
``FileExistsError`` unless ``fresh=True``, which deletes the backup and the
TensorBoard logs and starts over. A finished run deletes its backup after
writing ``metrics.json``. Under ``MultiWorkerMirroredStrategy`` only the chief
writes the backup (the other workers write theirs to a temporary folder that
they delete) and every worker restores from the chief's, so the run folder
must be on storage that every worker sees. The tests check the equality on
CPU, where TensorFlow's kernels are deterministic; on a GPU, call
``tf.config.experimental.enable_op_determinism()`` first for the same
guarantee (`train` does not, as some GPU kernels then refuse to run).

`translate_texts` decodes strings with a run folder (``keras-seq translate``).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Sequence
from typing import Any

import keras

from keras_seq._backend import START_UNDER_TENSORFLOW, require_tensorflow
from keras_seq._validation import (
    check_float,
    check_int,
    check_positive_int,
    invalid_value,
)
from keras_seq.reserved_tokens import PAD_ID, START_ID
from keras_seq.run_config import (
    ATTENTIONS,
    BACKUP_DIR,
    CELLS,
    DISTRIBUTIONS,
    LM_DEFAULTS,
    MODEL_DEFAULTS,
    MODELS,
    NOT_IN_BACKUP,
    PRECISIONS,
    TASKS,
    TrainingConfig,
    default_for,
)

__all__ = [
    "ATTENTIONS",
    "BACKUP_DIR",
    "CELLS",
    "DISTRIBUTIONS",
    "LM_DEFAULTS",
    "MODELS",
    "MODEL_DEFAULTS",
    "PRECISIONS",
    "PreparedData",
    "PreparedText",
    "TASKS",
    "TrainingConfig",
    "TrainingResult",
    "default_for",
    "evaluate_and_save",
    "InputWarning",
    "evaluate_text_and_save",
    "generate_text",
    "length_buckets",
    "load_data",
    "load_pairs",
    "make_decoder",
    "prepare_data",
    "text_loss",
    "train",
    "translate_strings",
    "translate_texts",
    "warn_about_inputs",
]

_DECODE_BATCH = 1000
_EVALUATE_BATCH = 256


@dataclasses.dataclass
class TrainingResult:
    """What `train` returns.

    Attributes:
        run_dir: the run folder written.
        metrics: the content of its ``metrics.json``.
        model: the trained `keras.Model`.
        tokenizer: the `keras_seq.text.CharTokenizer` of sources and targets.
    """

    run_dir: str
    metrics: dict
    model: Any
    tokenizer: Any


def train(config: TrainingConfig | None = None, **options) -> TrainingResult:
    """Trains a translation model and writes its run folder (``keras-seq train``).

    Args:
        config: a `TrainingConfig`; default ``TrainingConfig()``, the date task.
        **options: `TrainingConfig` fields that replace those of ``config``.

    Returns:
        A `TrainingResult`: the run folder, its metrics (held-out exact match
        ``test_exact_match`` = ``test_correct / test_examples``, timings,
        examples, errors and the resolved ``config``), the model and the
        tokenizer.

    Raises:
        ValueError, TypeError: a bad option (naming it), a ``batch_size``
            that is not a multiple of the replicas, a TSV file with fewer than
            3 pairs, or a backup written by a different configuration.
        FileExistsError: the run folder holds a finished run and ``fresh``
            is False.
    """
    require_tensorflow("keras_seq.training.train", START_UNDER_TENSORFLOW)
    t_start = time.perf_counter()
    config = dataclasses.replace(config or TrainingConfig(), **options).resolved()
    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(config.precision)
    try:
        return _train(config, t_start)
    finally:
        keras.config.set_dtype_policy(policy)


def _train(config: TrainingConfig, t_start: float) -> TrainingResult:

    from keras_seq.distribute import choose_strategy, is_chief, make_strategy

    # The data first, in Python only: bad data stops the run before anything
    # is created. Then the strategy: a multi-worker strategy must exist before
    # TensorFlow runs any op.
    loaded = load_data(config)
    strategy_name = choose_strategy() if config.distribute == "auto" else config.distribute
    strategy = make_strategy(strategy_name)
    replicas = strategy.num_replicas_in_sync
    if config.batch_size % replicas:
        raise invalid_value(
            "TrainingConfig", "batch_size",
            f"a multiple of the {replicas} replicas of the {strategy_name!r} strategy "
            "(batch_size is the global batch)", config.batch_size,
        )
    _say(config, f"Strategy: {strategy_name} ({type(strategy).__name__}), {replicas} replica(s)")

    fingerprint = {
        k: v for k, v in dataclasses.asdict(config).items() if k not in NOT_IN_BACKUP
    }
    chief = strategy_name != "multi_worker" or is_chief()
    config = dataclasses.replace(config, name=_run_name(config, fingerprint))
    shared_dir = os.path.join(config.out, config.name)
    backup_dir = os.path.join(shared_dir, BACKUP_DIR)
    state = None if config.fresh else _read_backup(backup_dir)
    if state is None and not config.fresh and os.path.isfile(
        os.path.join(shared_dir, "metrics.json")
    ):
        raise FileExistsError(
            f"{shared_dir} already holds a finished run (metrics.json); pass fresh=True "
            "(keras-seq train --fresh) to train it again from the start, or choose another name."
        )
    if state is not None and state["config"] != fingerprint:
        changed = sorted(k for k in fingerprint if state["config"].get(k) != fingerprint[k])
        raise ValueError(
            f"train: the backup in {backup_dir} was written by a run with other options "
            f"({', '.join(changed)}); run the same command to resume it, or pass fresh=True "
            "(--fresh) to start over."
        )
    if config.fresh and chief:
        for folder in (backup_dir, os.path.join(shared_dir, "logs")):
            shutil.rmtree(folder, ignore_errors=True)
    run_dir = shared_dir if chief else tempfile.mkdtemp(prefix="keras-seq-worker-")
    os.makedirs(run_dir, exist_ok=True)
    keras.utils.set_random_seed(config.seed)

    prepared = prepare_data(config, loaded)
    tokenizer, steps_per_epoch = prepared.tokenizer, prepared.steps_per_epoch
    t_data = time.perf_counter()

    with strategy.scope():
        model = _build_model(config, tokenizer.vocabulary_size)
        _compile(model, config, steps=config.epochs * steps_per_epoch)
        epoch, step = 0, 0
        if state is not None:
            epoch, step = _restore_backup(model, backup_dir, state)
            _say(config, f"Resuming from epoch {min(epoch, config.epochs - 1) + 1}"
                 + (f", step {step}" if step else "")
                 + (" (training had finished)" if epoch == config.epochs else ""))
    backup = _RunBackup(
        backup_dir if chief else tempfile.mkdtemp(prefix="keras-seq-backup-"),
        fingerprint, steps_per_epoch, config.backup_every_steps, step,
    )
    callbacks = [
        keras.callbacks.TensorBoard(os.path.join(run_dir, "logs")),
        backup,
        _History(os.path.join(run_dir, HISTORY_FILE), t_start, steps_per_epoch, epoch, step),
    ]
    fit = dict(
        validation_data=prepared.validation_data,
        shuffle=False,  # each epoch's order is drawn from (seed, epoch)
        callbacks=callbacks,
        verbose=config.verbose,
    )
    history = {}
    if step:  # the rest of an epoch cut short by the kill
        history = model.fit(
            prepared.epochs_data(epoch, epoch + 1, skip=step), initial_epoch=epoch,
            epochs=epoch + 1, steps_per_epoch=steps_per_epoch - step, **fit
        ).history
        epoch += 1
    if epoch < config.epochs:
        history = model.fit(
            prepared.epochs_data(epoch, config.epochs), initial_epoch=epoch,
            epochs=config.epochs, steps_per_epoch=steps_per_epoch, **fit
        ).history
    t_train = time.perf_counter()

    extra = {
        "strategy": strategy_name,
        "resumed_from_epoch": None if state is None else state["epoch"] + 1,
        # Of the last epoch (None when it was trained before a resumption).
        "loss": history["loss"][-1] if history else None,
    }
    seconds = {"data": t_data - t_start, "train": t_train - t_data}
    if config.task == "lm":
        metrics = evaluate_text_and_save(
            model, prepared, run_dir, dataclasses.asdict(config), seconds=seconds,
            started=t_start, replicas=replicas, extra=extra,
        )
    else:
        extra["val_loss"] = history["val_loss"][-1] if history else None
        metrics = evaluate_and_save(
            model, prepared, run_dir, dataclasses.asdict(config), seconds=seconds,
            started=t_start, replicas=replicas,
            attention=config.model == "transformer" or config.attention != "none",
            extra=extra,
        )
    # The run folder is complete: the backup has done its job.
    shutil.rmtree(backup.backup_dir, ignore_errors=True)
    return TrainingResult(run_dir, metrics, model, tokenizer)


def _say(config: TrainingConfig, message: str) -> None:
    if config.verbose:
        print(message, flush=True)


def load_pairs(config: TrainingConfig) -> tuple[list, list, list]:
    """``(train, validation, test)`` pairs: the date task, or a split of ``config.data``.

    Raises:
        FileNotFoundError: ``config.data`` does not exist.
        ValueError: naming the file: a line that is not ``source<TAB>target``,
            invalid UTF-8, or fewer than 3 pairs.
    """
    from keras_seq import data

    if config.data is None:
        task = data.date_task(
            train_size=config.train_size,
            validation_size=config.validation_size,
            test_size=config.test_size,
            seed=config.seed,
        )
        return task["train"], task["validation"], task["test"]
    path = _data_file(config)
    pairs = data.load_tsv(path)
    if len(pairs) < 3:
        raise ValueError(
            f"train: {path} holds {len(pairs)} source<TAB>target pair(s); a translation "
            "task needs at least 3 (one each for training, validation and test)."
        )
    task = data.split_pairs(
        pairs, validation_size=config.validation_size, test_size=config.test_size,
        seed=config.seed,
    )
    return task["train"], task["validation"], task["test"]


def _data_file(config: TrainingConfig) -> str:
    path = os.fspath(config.data)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"train: the data file {path} does not exist"
            + (" (it is a folder)" if os.path.isdir(path) else "")
            + "; --data takes a " + ("UTF-8 text file." if config.task == "lm" else
                                     "source<TAB>target file.")
        )
    return path


def _load_text(config: TrainingConfig) -> tuple[str, str, str]:
    """``(source, train_text, held_out_text)`` of a language-model run, checked."""
    from keras_seq import data

    source = data.tiny_shakespeare() if config.data is None else _data_file(config)
    full_text = data.load_text(source)
    train_text, held_out_text = data.split_text(full_text)
    if len(train_text) <= config.context or len(held_out_text) < 2:
        raise ValueError(
            f"train: {source} has {len(full_text)} characters; task 'lm' with "
            f"context={config.context} needs more than {config.context} in its first 90% "
            "and at least 2 in its last 10%."
        )
    return source, train_text, held_out_text


def load_data(config: TrainingConfig) -> tuple:
    """The data of a run, read and checked in Python only (no TensorFlow op),
    so that `train` stops on bad data before it creates anything.

    Returns:
        `load_pairs`' ``(train, validation, test)`` pairs, or for
        ``task="lm"`` ``(source file, training text, held-out text)``.
    """
    return _load_text(config) if config.task == "lm" else load_pairs(config)


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
        return batches.skip(skip).with_options(_data_sharding())


def _data_sharding():
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
            the text.
        context: the window length.
        validation_data: ``validation_size`` held-out windows
            (`keras_seq.data.text_windows`), evenly spread, in batches.
        batch_size, seed, steps_per_epoch: the config's, for `epochs_data`.
        source: the file the text was read from.
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

    def epochs_data(self, first_epoch: int, epochs: int, skip: int = 0):
        """The training batches of epochs ``first_epoch .. epochs - 1``, ``skip``
        batches dropped (`keras_seq.data.make_text_dataset`)."""
        from keras_seq import data

        batches = data.make_text_dataset(
            self.train_ids, self.batch_size, self.context, self.steps_per_epoch, self.seed,
            epochs=epochs, first_epoch=first_epoch,
        )
        return batches.skip(skip).with_options(_data_sharding())


def _prepare_text(config: TrainingConfig, loaded: tuple | None = None) -> PreparedText:
    import numpy as np
    import tensorflow as tf

    from keras_seq import data, text

    source, train_text, held_out_text = loaded or _load_text(config)
    full_text = train_text + held_out_text
    tokenizer = text.CharTokenizer.from_corpus([full_text])
    train_ids, held_out_ids = (
        tokenizer.tokenize([part]).flat_values.numpy().astype(np.int32)
        for part in (train_text, held_out_text)
    )
    inputs, targets = data.text_windows(held_out_ids, config.context)
    chosen = np.unique(np.linspace(0, len(inputs) - 1, config.validation_size).round().astype(int))
    validation_data = tf.data.Dataset.from_tensor_slices(
        (inputs[chosen], targets[chosen])
    ).batch(config.batch_size).with_options(_data_sharding())
    return PreparedText(
        train_ids, held_out_ids, tokenizer, config.context, validation_data,
        config.batch_size, config.seed, config.steps_per_epoch, source,
    )


def prepare_data(
    config: TrainingConfig, loaded: tuple | None = None
) -> PreparedData | PreparedText:
    """The data, tokenizer and datasets that `train` (and `tuning.search`) fit on.

    Args:
        config: a resolved `TrainingConfig` (`TrainingConfig.resolved`).
        loaded: what `load_data` returned for ``config``; None reads it.

    Returns:
        A `PreparedData` (translation tasks) or a `PreparedText` (``task="lm"``).
    """
    from keras_seq import data, text

    if config.task == "lm":
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
        ).with_options(_data_sharding())
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


def evaluate_and_save(
    model,
    prepared: PreparedData,
    run_dir: str,
    config: dict,
    seconds: dict,
    started: float,
    replicas: int = 1,
    attention: bool = True,
    extra: dict | None = None,
) -> dict:
    """Decodes the test split greedily and writes the run folder's files; returns the metrics.

    Writes ``model.keras``, the tokenizer files, ``attention.png`` (when
    ``attention``) and ``metrics.json`` (see the module docstring) to ``run_dir``.

    Args:
        model: the trained seq2seq model.
        prepared: the `prepare_data` it was trained on.
        run_dir: an existing folder.
        config: the run's options, recorded as ``metrics["config"]`` with
            ``source_length``, ``target_length``, ``vocabulary_size`` and
            ``parameters`` added (``verbose`` left out).
        seconds: timings so far (``data``, ``train``); ``evaluate`` and
            ``total`` (since ``started``, a `time.perf_counter` value) are added.
        replicas: the strategy's replicas in sync.
        attention: draw ``attention.png``.
        extra: further top-level entries of ``metrics.json``.
    """
    require_tensorflow("keras_seq.training.evaluate_and_save")
    t_decode = time.perf_counter()
    tokenizer, test_pairs = prepared.tokenizer, prepared.test_pairs
    source_length, target_length = prepared.source_length, prepared.target_length
    decode = make_decoder(model, source_length, target_length)
    sources = [s for s, _ in test_pairs]
    outputs = translate_strings(decode, tokenizer, sources, source_length)
    t_eval = time.perf_counter()

    model.save(os.path.join(run_dir, "model.keras"))
    tokenizer.save(run_dir)
    if attention:
        _attention_figure(
            model, tokenizer, sources[:3], outputs[:3], source_length, target_length,
            os.path.join(run_dir, "attention.png"),
        )
    t_end = time.perf_counter()

    correct = sum(o == t for o, (_, t) in zip(outputs, test_pairs))
    rows = [{"source": s, "target": t, "output": o} for (s, t), o in zip(test_pairs, outputs)]
    metrics = {
        "test_exact_match": correct / len(test_pairs),
        "replicas": replicas,
        "test_examples": len(test_pairs),
        "test_correct": correct,
        "train_examples": len(prepared.train_pairs),
        "decoding": "greedy",
        "seconds": {
            **{k: round(v, 2) for k, v in seconds.items()},
            "evaluate": round(t_eval - t_decode, 2),
            "total": round(t_end - started, 2),
        },
        "examples": rows[:5],
        "errors": [row for row in rows if row["output"] != row["target"]][:50],
        "config": {
            **{k: v for k, v in config.items() if k != "verbose"},
            "source_length": source_length,
            "target_length": target_length,
            "vocabulary_size": tokenizer.vocabulary_size,
            "parameters": model.count_params(),
        },
        **(extra or {}),
    }
    with open(os.path.join(run_dir, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(metrics, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return metrics


def text_loss(model, ids, context: int, batch_size: int = _EVALUATE_BATCH) -> tuple[float, int]:
    """Mean cross-entropy (nats per character) of a language model over a whole text.

    The text is cut into consecutive windows of ``context + 1`` ids
    (`keras_seq.data.text_windows`): every id but the first is predicted
    once, from the preceding ids of its window, and the losses
    −log softmax(logits)[target] are summed in float64.

    Args:
        model: a `models.language_model` (or any model ids ``(B, T)`` ->
            logits ``(B, T, V)``).
        ids: ``(N,)`` int ids, N ≥ 2, no padding.
        context: int, the window length (the training length).
        batch_size: int, windows per forward pass.

    Returns:
        ``(mean loss, number of predicted ids)``; exp(mean loss) is the perplexity.
    """
    require_tensorflow("keras_seq.training.text_loss")
    import numpy as np
    import tensorflow as tf

    from keras_seq import data

    batch_size = check_positive_int("text_loss", "batch_size", batch_size)
    inputs, targets = data.text_windows(ids, context)

    @tf.function(input_signature=[tf.TensorSpec([None, context], tf.int32)] * 2)
    def summed_loss(x, y):
        log_p = tf.nn.log_softmax(tf.cast(model(x, training=False), tf.float32))
        loss = -tf.gather(log_p, y, batch_dims=2)  # (B, T)
        return tf.reduce_sum(tf.where(tf.not_equal(y, PAD_ID), loss, 0.0), axis=-1)

    total = 0.0
    for start in range(0, len(inputs), batch_size):
        window = slice(start, start + batch_size)
        total += float(np.sum(summed_loss(inputs[window], targets[window]).numpy(), dtype=np.float64))
    count = int(np.count_nonzero(targets))
    return total / count, count


def evaluate_text_and_save(
    model,
    prepared: PreparedText,
    run_dir: str,
    config: dict,
    seconds: dict,
    started: float,
    replicas: int = 1,
    extra: dict | None = None,
) -> dict:
    """Scores a language model on the whole held-out text and writes its run folder.

    Writes ``model.keras``, the tokenizer files and ``metrics.json``:
    ``val_loss`` (`text_loss` of the held-out ids with the training
    ``context``), ``val_perplexity`` = exp(``val_loss``), ``val_characters``
    (the predicted characters: all held-out characters but the first),
    ``train_characters``, ``steps``, ``seconds`` and ``config`` (as
    `evaluate_and_save`), plus ``extra``.
    """
    require_tensorflow("keras_seq.training.evaluate_text_and_save")
    import math

    t_evaluate = time.perf_counter()
    val_loss, count = text_loss(model, prepared.held_out_ids, prepared.context)
    t_eval = time.perf_counter()
    model.save(os.path.join(run_dir, "model.keras"))
    prepared.tokenizer.save(run_dir)
    t_end = time.perf_counter()
    metrics = {
        "task": "lm",
        "val_loss": val_loss,
        "val_perplexity": math.exp(val_loss),
        "val_characters": count,
        "train_characters": int(len(prepared.train_ids)),
        "steps": int(config["epochs"]) * prepared.steps_per_epoch,
        "replicas": replicas,
        "data": prepared.source,
        "seconds": {
            **{k: round(v, 2) for k, v in seconds.items()},
            "evaluate": round(t_eval - t_evaluate, 2),
            "total": round(t_end - started, 2),
        },
        "config": {
            **{k: v for k, v in config.items() if k != "verbose"},
            "vocabulary_size": prepared.tokenizer.vocabulary_size,
            "parameters": model.count_params(),
        },
        **(extra or {}),
    }
    with open(os.path.join(run_dir, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(metrics, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return metrics


def _run_name(config: TrainingConfig, fingerprint: dict) -> str:
    """``config.name``; without one, the newest resumable run of this
    configuration in ``config.out``, or a new
    ``[lm-]<model>-<cell or layers x units>-<time>``."""
    prefix = "{}{}-{}-".format(
        "lm-" if config.task == "lm" else "",
        config.model, config.cell if config.model == "rnn" else f"{config.layers}x{config.units}",
    )
    if config.name:
        return config.name
    for state_path in sorted(
        glob.glob(os.path.join(glob.escape(config.out), prefix + "*", BACKUP_DIR, "state.json")),
        reverse=True,
    ):
        state = _read_backup(os.path.dirname(state_path))
        if state is not None and state["config"] == fingerprint:
            return os.path.basename(os.path.dirname(os.path.dirname(state_path)))
    return prefix + time.strftime("%Y%m%d-%H%M%S")


# ---------------------------------------------------------------------------
# Backups
#
# backup/state.json names the files of the last complete backup:
#   {"epoch": finished epochs, "step": steps done in the next epoch,
#    "weights": "ckpt-E-S.weights.h5", "seeds": "ckpt-E-S.seeds.npz",
#    "config": the options that must not change on resuming}
# Each backup writes new files, then replaces state.json atomically, then
# deletes the previous files: a kill at any point leaves one complete backup.


def _read_backup(backup_dir: str) -> dict | None:
    try:
        with open(os.path.join(backup_dir, "state.json"), encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def _seed_states(model) -> list:
    """The dropout `SeedGenerator` states: variables of the model that
    ``save_weights`` does not save."""
    weights = {id(v) for v in model.weights}
    return [v for v in model.variables if id(v) not in weights]


def _restore_backup(model, backup_dir: str, state: dict) -> tuple[int, int]:
    import numpy as np

    build_optimizer(model)
    model.load_weights(os.path.join(backup_dir, state["weights"]))
    with np.load(os.path.join(backup_dir, state["seeds"])) as seeds:
        for i, variable in enumerate(_seed_states(model)):
            variable.assign(seeds[f"arr_{i}"])
    return int(state["epoch"]), int(state["step"])


def _write_backup(model, backup_dir: str, epoch: int, step: int, fingerprint: dict) -> None:
    import numpy as np

    os.makedirs(backup_dir, exist_ok=True)
    base = f"ckpt-{epoch}-{step}"
    model.save_weights(os.path.join(backup_dir, base + ".weights.h5"))
    np.savez(os.path.join(backup_dir, base + ".seeds.npz"),
             *[np.asarray(v.numpy()) for v in _seed_states(model)])
    state = {"epoch": epoch, "step": step, "weights": base + ".weights.h5",
             "seeds": base + ".seeds.npz", "config": fingerprint}
    temporary = os.path.join(backup_dir, "state.json.tmp")
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, os.path.join(backup_dir, "state.json"))
    for path in glob.glob(os.path.join(glob.escape(backup_dir), "ckpt-*")):
        if not os.path.basename(path).startswith(base + "."):
            os.remove(path)


HISTORY_FILE = "history.csv"
_HISTORY_COLUMNS = ("epoch", "step", "wall_seconds", "loss", "val_loss", "perplexity",
                    "val_perplexity")


class _History(keras.callbacks.Callback):
    """Appends one row per finished epoch to ``history.csv`` (see the module docstring).

    A resumed run keeps the rows of the epochs its backup holds and drops
    any later ones (written after that backup, before the kill).
    """

    def __init__(self, path, started, steps_per_epoch, epoch, step):
        super().__init__()
        self._path = path
        self._started = started
        self._steps_per_epoch = steps_per_epoch
        rows = []
        if epoch or step:
            try:
                with open(path, encoding="utf-8") as f:
                    rows = [line for line in f.read().splitlines()[1:]
                            if line and int(line.split(",")[0]) <= epoch]
            except FileNotFoundError:
                pass
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join([",".join(_HISTORY_COLUMNS), *rows]) + "\n")

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        values = {
            "epoch": epoch + 1,
            "step": (epoch + 1) * self._steps_per_epoch,
            "wall_seconds": round(time.perf_counter() - self._started, 2),
        }
        row = [values.get(k, logs.get(k, "")) for k in _HISTORY_COLUMNS]
        with open(self._path, "a", encoding="utf-8") as f:
            f.write(",".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in row) + "\n")


class _RunBackup(keras.callbacks.BackupAndRestore):
    """`BackupAndRestore` with atomic backups, seed states and mid-epoch resumption.

    Keras 3.15's callback restores only at epoch boundaries (a step
    backup would make the run redo that epoch's first steps on other
    weights), can leave a weights file and a metadata file that disagree
    after a kill, and has no chief logic. `train` restores before
    ``fit`` (the data of the resumed epoch depend on the backup) and
    deletes the backup once the run folder is written.
    """

    def __init__(self, backup_dir, fingerprint, steps_per_epoch, every_steps, step):
        super().__init__(backup_dir, save_freq=every_steps or "epoch", delete_checkpoint=False)
        self._fingerprint = fingerprint
        self._steps_per_epoch = steps_per_epoch
        self._step_offset = step  # steps of the first epoch done before this process
        self._epoch = 0

    def on_train_begin(self, logs=None):
        pass  # restored by `train`

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        step = self._step_offset + batch + 1
        if self.save_freq != "epoch" and step % self.save_freq == 0 and (
            step < self._steps_per_epoch
        ):
            _write_backup(self.model, self.backup_dir, self._epoch, step, self._fingerprint)

    def on_epoch_end(self, epoch, logs=None):
        self._step_offset = 0
        _write_backup(self.model, self.backup_dir, epoch + 1, 0, self._fingerprint)

    def on_train_end(self, logs=None):
        pass  # deleted by `train` once the run folder is complete


def _max_length(tokenizer, strings, extra, cap):
    lengths = tokenizer.tokenize(list(strings)).row_lengths()
    return int(min(cap, int(lengths.numpy().max()) + extra))


def _build_model(config: TrainingConfig, vocabulary_size: int):
    from keras_seq import models

    if config.task == "lm":
        return models.language_model(
            vocabulary_size,
            kind=config.model,
            num_layers=config.layers,
            units=config.units,
            num_heads=4,
            intermediate_dim=4 * config.units,
            cell=config.cell,
            dropout=0.0,
        )
    if config.model == "rnn":
        return models.rnn_seq2seq(
            vocabulary_size,
            vocabulary_size,
            units=config.units,
            cell=config.cell,
            attention=None if config.attention == "none" else "bahdanau",
        )
    return models.transformer_seq2seq(
        vocabulary_size,
        vocabulary_size,
        num_layers=config.layers,
        model_dim=config.units,
        num_heads=4,
        intermediate_dim=4 * config.units,
        dropout=0.1,
    )


def _compile(model, config: TrainingConfig, steps: int) -> None:
    import keras

    # Linear warm-up over the first 5% of the steps (the Transformer's
    # post-norm blocks need it), then cosine decay to 5% of the peak.
    warmup = steps // 20
    learning_rate = keras.optimizers.schedules.CosineDecay(
        0.0,
        decay_steps=max(1, steps - warmup),
        alpha=0.05,
        warmup_target=config.learning_rate,
        warmup_steps=warmup,
    )
    metrics = None
    if config.task == "lm":
        from keras_seq.metrics import Perplexity

        metrics = [Perplexity(mask_token_id=PAD_ID)]
    # β2 = 0.99 for the language models, as nanoGPT: few tokens per step.
    beta_2 = 0.99 if config.task == "lm" else 0.999
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate, beta_2=beta_2, clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD_ID),
        metrics=metrics,
    )
    build_optimizer(model)


def build_optimizer(model) -> None:
    """Creates the optimizer's variables of a compiled ``model`` now, under the
    current strategy scope (for every pipeline that compiles a model: this
    module's and the hypermodels of `keras_seq.tuning`).

    Without a distribution strategy Keras creates them inside the first trace
    of the train step, and a `tf.function` that creates variables while
    tracing is traced a second time: on the date task that second trace cost
    about 6.5 s of every run (benchmarks/RESULTS.md).
    """
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)


# ---------------------------------------------------------------------------
# Decoding with a tokenizer


def make_decoder(
    model, source_length: int, target_length: int, beam_width: int = 0,
    length_penalty: float = 0.0,
):
    """A traced decoding function: ``(B, source_length)`` ids -> ``(B, target_length)`` ids.

    Greedy for ``beam_width=0``, else `keras_seq.decoding.beam_search` with
    that width and GNMT length penalty.
    """
    require_tensorflow("keras_seq.training.make_decoder")
    import tensorflow as tf

    from keras_seq import decoding

    beam_width = check_int("make_decoder", "beam_width", beam_width, minimum=0)
    spec = tf.TensorSpec([None, source_length], tf.int32)
    if beam_width:

        @tf.function(input_signature=[spec], autograph=False)
        def decode(source_ids):
            ids, _ = decoding.beam_search(
                model, source_ids, target_length, beam_width, length_penalty
            )
            return ids

    else:

        @tf.function(input_signature=[spec], autograph=False)
        def decode(source_ids):
            return decoding.greedy_decode(model, source_ids, target_length)

    return decode


def translate_strings(decode, tokenizer, strings: Sequence[str], source_length: int) -> list[str]:
    """Decodes ``strings`` with a `make_decoder` function, in batches of 1000."""
    outputs = []
    for start in range(0, len(strings), _DECODE_BATCH):
        chunk = list(strings[start : start + _DECODE_BATCH])
        ids = decode(tokenizer.encode(chunk, source_length))
        outputs.extend(s.decode("utf-8") for s in tokenizer.detokenize(ids).numpy())
    return outputs


def translate_texts(
    run_dir: str | os.PathLike,
    texts: Sequence[str],
    beam_width: int = 0,
    length_penalty: float = 0.0,
) -> list[str]:
    """The outputs of the model in a run folder for ``texts`` (``keras-seq translate``).

    Args:
        run_dir: a folder written by `train`.
        texts: the inputs.
        beam_width: 0 (greedy) or a beam width.
        length_penalty: GNMT length penalty α for beam search.

    Raises:
        FileNotFoundError: ``run_dir`` has no ``metrics.json``.
    """
    require_tensorflow("keras_seq.training.translate_texts", START_UNDER_TENSORFLOW)
    import keras

    import keras_seq.layers  # noqa: F401  (registers the layers for loading)
    import keras_seq.models  # noqa: F401
    from keras_seq import text

    where = "translate_texts"
    beam_width = check_int(where, "beam_width", beam_width, minimum=0)
    length_penalty = check_float(where, "length_penalty", length_penalty, low=0.0)
    if isinstance(texts, (str, bytes)) or not all(isinstance(t, str) for t in texts):
        raise TypeError(f"{where}: `texts` must be a sequence of str, received {texts!r:.80}.")
    config = _run_config(run_dir)
    if config.get("task") == "lm":
        raise ValueError(
            f"translate_texts: {os.fspath(run_dir)} holds a language model; sample from it "
            "with generate_text (keras-seq generate)."
        )
    run_dir = os.fspath(run_dir)
    model = keras.saving.load_model(os.path.join(run_dir, "model.keras"), safe_mode=True)
    tokenizer = text.load_tokenizer(run_dir)
    texts = list(texts)
    warn_about_inputs(tokenizer, texts, config["source_length"])
    decode = make_decoder(
        model, config["source_length"], config["target_length"], beam_width, length_penalty
    )
    return translate_strings(decode, tokenizer, texts, config["source_length"])


class InputWarning(UserWarning):
    """An input that the model reads otherwise than it is written: cut to the
    run's source length, with characters outside the vocabulary, or empty
    (`warn_about_inputs`)."""


def warn_about_inputs(tokenizer, texts: Sequence[str], source_length: int) -> list[str]:
    """Warns (`InputWarning`, one per input) about inputs that the model does not
    see as written, and returns the messages.

    The model reads ``source_length`` tokens: a longer input is cut there. A
    character outside the run's vocabulary becomes ``[UNK]``. An empty input
    still decodes to something. Each is translated anyway; the warning says
    what the model read.
    """
    from keras_seq.reserved_tokens import UNK_ID

    messages = []
    ids = tokenizer.tokenize(list(texts)).to_list() if texts else []
    for number, (text, text_ids) in enumerate(zip(texts, ids), 1):
        shown = text if len(text) <= 40 else text[:37] + "..."
        problems = []
        if not text:
            problems.append("is empty: the output is the model's guess for no input")
        if len(text_ids) > source_length:
            kept = tokenizer.detokenize([text_ids[:source_length]]).numpy()[0].decode("utf-8")
            problems.append(
                f"has {len(text_ids)} tokens, more than the run's source length "
                f"{source_length}: only {kept!r} is translated"
            )
        unknown = sorted({c for c, i in zip(text, text_ids) if i == UNK_ID}) if (
            len(text) == len(text_ids)) else None
        if UNK_ID in text_ids:
            where = f" ({''.join(unknown)!r})" if unknown else ""
            problems.append(f"has characters outside the run's vocabulary{where}, read as [UNK]")
        for problem in problems:
            message = f"input {number} {shown!r} {problem}"
            warnings.warn(message, InputWarning, stacklevel=2)
            messages.append(message)
    return messages


def _run_config(run_dir) -> dict:
    """The ``config`` of a run folder's ``metrics.json``."""
    metrics_path = os.path.join(os.fspath(run_dir), "metrics.json")
    if not os.path.isfile(metrics_path):
        raise FileNotFoundError(
            f"{os.fspath(run_dir)} is not a run folder: {metrics_path} does not exist "
            "(a run folder is written by `keras-seq train`)."
        )
    with open(metrics_path, encoding="utf-8") as f:
        return json.load(f)["config"]


def generate_text(
    run_dir: str | os.PathLike,
    prompt: str,
    length: int = 500,
    temperature: float = 1.0,
    seed: int | None = None,
) -> str:
    """Samples ``length`` characters after ``prompt`` from a language-model run (``keras-seq generate``).

    `keras_seq.decoding.sample` in one `tf.function` (one `tf.while_loop`,
    cached for the Transformer, with the run's training ``context`` as its
    window).

    Args:
        run_dir: a folder written by `train` with ``task="lm"``.
        prompt: str, at least one character, every one of them in the run's
            vocabulary.
        length: int, characters to sample.
        temperature: float T ≥ 0: logits / T are sampled; 0 is greedy
            (the most probable character each time). Default 1.
        seed: int or None: the same seed, prompt and run give the same text;
            None samples afresh.

    Returns:
        The ``length`` sampled characters (without the prompt).

    Raises:
        FileNotFoundError: ``run_dir`` has no ``metrics.json``.
        ValueError: the run is not a language model, the prompt is empty or
            has characters outside the vocabulary, or a bad argument.
    """
    require_tensorflow("keras_seq.training.generate_text", START_UNDER_TENSORFLOW)
    import keras
    import tensorflow as tf

    import keras_seq.layers  # noqa: F401  (registers the layers for loading)
    import keras_seq.metrics  # noqa: F401
    import keras_seq.models  # noqa: F401
    from keras_seq import decoding, text
    from keras_seq.reserved_tokens import RESERVED_TOKENS

    where = "generate_text"
    config = _run_config(run_dir)
    if config.get("task") != "lm":
        raise ValueError(
            f"{where}: {os.fspath(run_dir)} holds a translation model, not a language model "
            "(train one with task='lm'); use translate_texts."
        )
    if not isinstance(prompt, str):
        raise TypeError(f"{where}: `prompt` must be a str, received {type(prompt).__name__}.")
    if not prompt:
        raise invalid_value(where, "prompt", "at least one character", prompt)
    tokenizer = text.load_tokenizer(run_dir)
    vocabulary = tokenizer.vocabulary
    unknown = sorted(set(prompt) - set(vocabulary[len(RESERVED_TOKENS):]))
    if unknown:
        raise invalid_value(
            where, "prompt", "characters of the run's vocabulary",
            f"{prompt!r} (not in it: {''.join(unknown)!r})",
        )
    length = check_positive_int(where, "length", length)
    temperature = check_float(where, "temperature", temperature, low=0.0)
    seed = check_int(where, "seed", seed, allow_none=True)
    model = keras.saving.load_model(  # for inference: no optimizer
        os.path.join(os.fspath(run_dir), "model.keras"), safe_mode=True, compile=False
    )

    @tf.function(autograph=False)
    def run(prompt_ids):
        # The reserved ids never occur in the text: only its characters are drawn.
        return decoding.sample(
            model, prompt_ids, length, temperature, seed, context=config["context"],
            suppress_ids=range(1, len(RESERVED_TOKENS)),
        )

    ids = run(tokenizer.tokenize([prompt]).to_tensor())[0].numpy()
    return "".join(vocabulary[i] for i in ids)


def _attention_figure(model, tokenizer, sources, outputs, source_length, target_length, path):
    """Draws the attention weights (output tokens x source tokens) for a few examples."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import tensorflow as tf

    from keras_seq import decoding
    from keras_seq.models import seq2seq_kind

    encoder_inputs = tokenizer.encode(sources, source_length)
    output_ids = tokenizer.encode(outputs, target_length, add_end=True)
    decoder_inputs = tf.concat(
        [tf.fill([len(sources), 1], START_ID), output_ids[:, :-1]], axis=1
    )
    alpha = np.asarray(decoding.attention_weights(model, encoder_inputs, decoder_inputs))
    title = (
        "Bahdanau attention weights α (greedy decoding)"
        if seq2seq_kind(model) == "rnn"
        else "Cross-attention of the last decoder block, mean over heads (greedy decoding)"
    )

    fig, axes = plt.subplots(1, len(sources), figsize=(4.2 * len(sources), 4.5))
    for ax, source, output, a in zip(np.atleast_1d(axes), sources, outputs, alpha):
        source_tokens = [tokenizer.vocabulary[int(i)] for i in tokenizer.tokenize([source])[0]]
        output_tokens = [tokenizer.vocabulary[int(i)] for i in tokenizer.tokenize([output])[0]]
        output_tokens.append("[END]")
        ax.imshow(a[: len(output_tokens), : len(source_tokens)], cmap="viridis", vmin=0, vmax=1)
        ax.set_xticks(range(len(source_tokens)), source_tokens, fontsize=7)
        ax.set_yticks(range(len(output_tokens)), output_tokens, fontsize=7)
        ax.set_xlabel("source")
        ax.set_ylabel("output")
        ax.set_title(source, fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
