"""`train`: the run, from the data to the run folder (``keras-seq train``).

One pipeline for every task: the run's recipe (`keras_seq.recipes`, by its
``task``) reads its data, prepares its datasets, builds its task model and
its loss, and scores it; this module runs the strategy, the folder lock,
the backups (`keras_seq.training.backup`) and ``fit``, and the run folder
is written by `keras_seq.training.evaluation.evaluate_and_save`.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
import warnings
from typing import Any

import keras

from keras_seq import recipes
from keras_seq._backend import START_UNDER_TENSORFLOW, require_tensorflow
from keras_seq._validation import Arg, ArgumentValueError, ExistingFileError, invalid_value
from keras_seq.recipes.recipe import RunResultWarning
from keras_seq.run_config import BACKUP_DIR, TrainingConfig
from keras_seq.run_folder import warn_about_script_classes
from keras_seq.training.backup import (
    HISTORY_FILE,
    BestEpoch,
    History,
    RunBackup,
    read_backup,
    restore_backup,
    run_fingerprint,
    run_name,
)
from keras_seq.training.evaluation import evaluate_and_save
from keras_seq.training.locking import folder_lock

__all__ = ["TrainingResult", "train"]


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
        FolderInUseError: another process is training (or tuning) into the
            same run folder.
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

    # The data first, in Python only (and a fine-tuning run's language model,
    # its options only): bad data stops the run before anything is created.
    # Then the strategy: a multi-worker strategy must exist before TensorFlow
    # runs any op.
    recipe = recipes.get(config.task)
    config = recipe.complete(config)
    loaded = recipe.read(config)
    strategy_name = choose_strategy() if config.distribute == "auto" else config.distribute
    strategy = make_strategy(strategy_name)
    replicas = strategy.num_replicas_in_sync
    if config.batch_size % replicas:
        raise invalid_value(
            "TrainingConfig", "batch_size",
            f"a multiple of the {replicas} replicas of the {strategy_name!r} strategy "
            "(batch_size is the global batch)", config.batch_size,
        )

    fingerprint = run_fingerprint(config)
    chief = strategy_name != "multi_worker" or is_chief()
    config = dataclasses.replace(config, name=run_name(config, fingerprint))
    shared_dir = os.path.join(config.out, config.name)
    # Only the chief writes the run folder; the other workers of a cluster
    # (which may share the machine and the folder) write their copies of the
    # run and of its backup to a folder of their own, deleted whatever happens.
    if chief:
        with folder_lock(shared_dir, "train"):
            return _train_in_folder(recipe, config, t_start, loaded, strategy, strategy_name,
                                    fingerprint, shared_dir, None)
    with tempfile.TemporaryDirectory(prefix="keras-seq-worker-") as scratch:
        result = _train_in_folder(recipe, config, t_start, loaded, strategy, strategy_name,
                                  fingerprint, shared_dir, scratch)
    return dataclasses.replace(result, run_dir=shared_dir)


def _train_in_folder(recipe, config, t_start, loaded, strategy, strategy_name, fingerprint,
                     shared_dir, scratch):
    """One run; ``scratch`` is a worker's own folder (None on the chief)."""
    chief = scratch is None
    replicas = strategy.num_replicas_in_sync
    backup_dir = os.path.join(shared_dir, BACKUP_DIR)
    state = None if config.fresh else read_backup(backup_dir)
    if state is None and not config.fresh and os.path.isfile(
        os.path.join(shared_dir, "metrics.json")
    ):
        raise ExistingFileError(
            "train", f"{shared_dir} already holds a finished run (metrics.json); pass ",
            Arg("fresh", True), " to train it again from the start, or choose another ",
            Arg("name"), "."
        )
    if state is not None and state["config"] != fingerprint:
        changed = sorted(k for k in fingerprint if state["config"].get(k) != fingerprint[k])
        raise ArgumentValueError(
            "train", f"the backup in {backup_dir} was written by a run with other options (",
            *_listed([Arg(k) for k in changed]), "); run the same command to resume it, or "
            "pass ", Arg("fresh", True), " to start over."
        )
    # Said once the folder is known to be usable: nothing on stdout before a refusal.
    _say(config, f"Strategy: {strategy_name} ({type(strategy).__name__}), {replicas} replica(s)")
    if config.fresh and chief:
        for folder in (backup_dir, os.path.join(shared_dir, "logs")):
            shutil.rmtree(folder, ignore_errors=True)
    run_dir = shared_dir if chief else scratch
    keras.utils.set_random_seed(config.seed)

    # Before the folder: a text too short in WordPiece tokens, or a
    # vocabulary larger than asked, is found only once the tokenizer is learned.
    prepared = recipe.prepare(config, loaded, replicas)
    os.makedirs(run_dir, exist_ok=True)
    tokenizer, steps_per_epoch = prepared.tokenizer, prepared.steps_per_epoch
    for line in recipe.notes(prepared, config):
        _say(config, line)
    t_data = time.perf_counter()

    with strategy.scope():
        task = recipe.build(config, prepared)
        warn_about_script_classes(task, "train")
        model = recipe.trainer(task, config, prepared)  # what fit trains
        recipe.compile(model, config, steps=config.epochs * steps_per_epoch)
        epoch, step = 0, 0
        if state is not None:
            epoch, step = restore_backup(model, backup_dir, state)
            _say(config, f"Resuming from epoch {min(epoch, config.epochs - 1) + 1}"
                 + (f", step {step}" if step else "")
                 + (" (training had finished)" if epoch == config.epochs else ""))
    backup = RunBackup(
        os.path.join(run_dir, BACKUP_DIR),  # the worker's own copy on a non-chief worker
        fingerprint, steps_per_epoch, config.backup_every_steps, step,
    )
    history_path = os.path.join(run_dir, HISTORY_FILE)
    # Before `History` rewrites the file: a resumed run reads its best epoch there.
    best = None if recipe.early_stopping_patience is None else BestEpoch(
        recipe.early_stopping_patience, backup.backup_dir, history_path, epoch)
    callbacks = [
        keras.callbacks.TensorBoard(os.path.join(run_dir, "logs")),
        *([best] if best else []),  # its best weights before the epoch's backup
        backup,
        History(history_path, t_start, steps_per_epoch, epoch, step),
    ]
    fit = dict(
        validation_data=prepared.validation_data,
        shuffle=False,  # each epoch's order is drawn from (seed, epoch)
        callbacks=callbacks,
        verbose=config.fit_verbosity,
    )
    history = {}
    if step:  # the rest of an epoch cut short by the kill
        history = model.fit(
            prepared.epochs_data(epoch, epoch + 1, skip=step), initial_epoch=epoch,
            epochs=epoch + 1, steps_per_epoch=steps_per_epoch - step, **fit
        ).history
        epoch += 1
    if epoch < config.epochs and not (best and best.done(epoch)):
        history = model.fit(
            prepared.epochs_data(epoch, config.epochs), initial_epoch=epoch,
            epochs=config.epochs, steps_per_epoch=steps_per_epoch, **fit
        ).history
        epoch += len(history.get("loss", ()))
    if best:
        best.restore_best(model, epoch)
    t_train = time.perf_counter()

    extra = {
        "strategy": strategy_name,
        "resumed_from_epoch": None if state is None else state["epoch"] + 1,
        # Of the last epoch (None when it was trained before a resumption).
        "loss": history["loss"][-1] if history else None,
        # Of the last epoch's validation; a score of the recipe's own name wins.
        "val_loss": history["val_loss"][-1] if history.get("val_loss") else None,
    }
    if best:  # the epochs trained, and the one whose weights the run keeps
        extra.update(epochs_trained=epoch, best_epoch=best.best_epoch or epoch)
    seconds = {"data": t_data - t_start, "train": t_train - t_data}
    metrics = evaluate_and_save(task, prepared, run_dir, config, seconds=seconds,
                                started=t_start, replicas=replicas, extra=extra)
    # The run folder is complete: the backup has done its job.
    shutil.rmtree(backup.backup_dir, ignore_errors=True)
    # The held-out result, as Keras' `evaluate` prints its scores with `verbose`.
    # The chief's folder, also on another worker (whose own copy is deleted).
    _say(config, result_summary(metrics, shared_dir))
    for message in recipe.result_warnings(metrics, config):
        warnings.warn(message, RunResultWarning, stacklevel=3)
    return TrainingResult(run_dir, metrics, recipe.kept(task), tokenizer)


def result_summary(metrics: dict, run_dir: str) -> str:
    """The run's held-out result, its time and its folder, on one line:
    ``Held-out exact match: 99.92% (1999/2000), total 54 s. Run written to runs/dates``."""
    line = recipes.recipe_of_run(metrics["config"]).result_line(metrics)
    return f"{line}, total {metrics['seconds']['total']:.0f} s. Run written to {run_dir}"


def _listed(parts: list) -> list:
    """``parts`` separated by commas, as message parts."""
    listed = []
    for i, part in enumerate(parts):
        listed += [", ", part] if i else [part]
    return listed


def _say(config: TrainingConfig, message: str) -> None:
    if config.verbose:
        print(message, flush=True)
