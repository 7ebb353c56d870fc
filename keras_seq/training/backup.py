"""Resuming a run: its name, its backups and its history file.

``backup/state.json`` names the files of the last complete backup::

    {"epoch": finished epochs, "step": steps done in the next epoch,
     "weights": "ckpt-E-S.weights.h5", "seeds": "ckpt-E-S.seeds.npz",
     "config": the options that must not change on resuming}

Each backup writes new files, then replaces ``state.json`` atomically, then
deletes the previous files: a kill at any point leaves one complete backup.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import time

import keras

from keras_seq import recipes
from keras_seq.recipes.optimization import build_optimizer
from keras_seq.run_config import BACKUP_DIR, NOT_IN_BACKUP, TrainingConfig

__all__ = [
    "BestEpoch",
    "HISTORY_FILE",
    "History",
    "RunBackup",
    "read_backup",
    "restore_backup",
    "run_fingerprint",
    "run_name",
    "seed_states",
    "write_backup",
]


def run_fingerprint(config: TrainingConfig) -> dict:
    """The options a backup records (all but `NOT_IN_BACKUP`): a run resumes
    only a backup written with the same."""
    return {k: v for k, v in dataclasses.asdict(config).items() if k not in NOT_IN_BACKUP}


def run_name(config: TrainingConfig, fingerprint: dict) -> str:
    """``config.name``; without one, the newest resumable run of this
    configuration in ``config.out``, or a new
    ``[lm-]<model>-<cell or layers x units>-<time>``."""
    prefix = "{}{}-{}-".format(
        recipes.get(config.task).run_prefix, config.model,
        config.cell if config.model == "rnn" else f"{config.layers}x{config.units}",
    )
    if config.name:
        return config.name
    for state_path in sorted(
        glob.glob(os.path.join(glob.escape(config.out), prefix + "*", BACKUP_DIR, "state.json")),
        reverse=True,
    ):
        state = read_backup(os.path.dirname(state_path))
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


def read_backup(backup_dir: str) -> dict | None:
    try:
        with open(os.path.join(backup_dir, "state.json"), encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def seed_states(model) -> list:
    """The dropout `SeedGenerator` states: variables of the model that
    ``save_weights`` does not save."""
    weights = {id(v) for v in model.weights}
    return [v for v in model.variables if id(v) not in weights]


def restore_backup(model, backup_dir: str, state: dict) -> tuple[int, int]:
    import numpy as np

    build_optimizer(model)
    model.load_weights(os.path.join(backup_dir, state["weights"]))
    with np.load(os.path.join(backup_dir, state["seeds"])) as seeds:
        for i, variable in enumerate(seed_states(model)):
            variable.assign(seeds[f"arr_{i}"])
    return int(state["epoch"]), int(state["step"])


def write_backup(model, backup_dir: str, epoch: int, step: int, fingerprint: dict) -> None:
    import numpy as np

    os.makedirs(backup_dir, exist_ok=True)
    base = f"ckpt-{epoch}-{step}"
    model.save_weights(os.path.join(backup_dir, base + ".weights.h5"))
    np.savez(os.path.join(backup_dir, base + ".seeds.npz"),
             *[np.asarray(v.numpy()) for v in seed_states(model)])
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
"""The run folder's per-epoch log (`History`): one row per finished epoch,
columns epoch, step, wall_seconds, loss, val_loss and, for language models,
perplexity and val_perplexity."""
_HISTORY_COLUMNS = ("epoch", "step", "wall_seconds", "loss", "val_loss", "perplexity",
                    "val_perplexity")


class History(keras.callbacks.Callback):
    """Appends one row per finished epoch to ``history.csv`` (see the module docstring).

    A resumed run keeps the rows of the epochs its backup holds and drops
    any later ones (written after that backup, before the kill).
    """

    def __init__(self, path, started, steps_per_epoch, epoch, step):
        super().__init__()
        self._path = path
        self._started = started
        self._steps_per_epoch = steps_per_epoch
        rows = _rows_up_to(path, epoch) if epoch or step else []
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


class BestEpoch(keras.callbacks.Callback):
    """Stops training once the validation loss has not improved for
    ``patience`` epochs, and gives back the weights of its best epoch
    (`restore_best`): Keras' ``EarlyStopping(restore_best_weights=True)``,
    whose state survives a resumption. The best weights are a file of the
    backup folder (``best.weights.h5``, written before the epoch's backup),
    and a resumed run reads the best validation loss and its epoch back
    from ``history.csv`` (the rows of the epochs its backup holds).

    Args:
        patience: epochs without a lower validation loss before training stops.
        backup_dir: the run's backup folder.
        history_path: the run's ``history.csv``.
        epoch: the finished epochs the run resumes from (0: a new run).
    """

    def __init__(self, patience: int, backup_dir: str, history_path: str, epoch: int):
        super().__init__()
        self.patience = patience
        self.path = os.path.join(backup_dir, BEST_WEIGHTS_FILE)
        self.best, self.best_epoch = float("inf"), 0
        if epoch:
            for finished, value in _validation_losses(history_path, epoch):
                if value < self.best:
                    self.best, self.best_epoch = value, finished

    def done(self, epoch: int) -> bool:
        """Whether a run that has finished ``epoch`` epochs has stopped."""
        return self.best_epoch > 0 and epoch - self.best_epoch >= self.patience

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get("val_loss")
        if value is None:
            return
        if value < self.best:
            self.best, self.best_epoch = float(value), epoch + 1
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            temporary = self.path[: -len(".weights.h5")] + ".partial.weights.h5"
            self.model.save_weights(temporary)
            os.replace(temporary, self.path)
        if self.done(epoch + 1):
            self.model.stop_training = True

    def restore_best(self, model, epoch: int) -> bool:
        """Loads the best epoch's weights into ``model`` when a later epoch
        was its last (``epoch``: the epochs trained); whether it did."""
        if not self.best_epoch or self.best_epoch == epoch or not os.path.isfile(self.path):
            return False
        model.load_weights(self.path)
        return True


BEST_WEIGHTS_FILE = "best.weights.h5"


def _rows_up_to(history_path: str, epoch: int) -> list[str]:
    """The rows of ``history.csv`` (header left out) of the epochs up to ``epoch``."""
    try:
        with open(history_path, encoding="utf-8") as f:
            lines = f.read().splitlines()[1:]
    except FileNotFoundError:
        return []
    return [line for line in lines if line and int(line.split(",")[0]) <= epoch]


def _validation_losses(history_path: str, epoch: int) -> list[tuple[int, float]]:
    """``(epoch, val_loss)`` of the rows of ``history.csv`` up to ``epoch``."""
    column = _HISTORY_COLUMNS.index("val_loss")
    found = []
    for line in _rows_up_to(history_path, epoch):
        cells = line.split(",")
        if len(cells) > column and cells[column]:
            found.append((int(cells[0]), float(cells[column])))
    return found


class RunBackup(keras.callbacks.BackupAndRestore):
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
            write_backup(self.model, self.backup_dir, self._epoch, step, self._fingerprint)

    def on_epoch_end(self, epoch, logs=None):
        self._step_offset = 0
        write_backup(self.model, self.backup_dir, epoch + 1, 0, self._fingerprint)

    def on_train_end(self, logs=None):
        pass  # deleted by `train` once the run folder is complete
