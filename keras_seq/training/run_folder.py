"""Reading a run folder: the one reader that translate, generate and export use.

A run folder is what `keras_seq.training.train` (or `keras_seq.tuning.search`)
writes: ``metrics.json`` (with the run's ``config``), ``model.keras``, the
tokenizer files, and for translation runs ``test.tsv``, the held-out split
the run was scored on, so that its pairs are read back as they were, never
drawn again from the run's options.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence

__all__ = [
    "HELD_OUT_FILE",
    "HELD_OUT_TEXT_FILE",
    "RunFolder",
    "read_run",
    "write_held_out",
    "write_held_out_text",
]

HELD_OUT_FILE = "test.tsv"
"""The held-out (test) pairs of a translation run, ``source<TAB>target`` lines."""
HELD_OUT_TEXT_FILE = "test.txt"
"""The held-out (test) text of a language-model run: the last 10% of its text."""


@dataclasses.dataclass(frozen=True)
class RunFolder:
    """A run folder and its ``metrics.json`` (`read_run`).

    Attributes:
        path: the folder.
        metrics: the content of ``metrics.json``; its ``config`` is `config`.
    """

    path: str
    metrics: dict

    @property
    def config(self) -> dict:
        """The run's options (``metrics["config"]``)."""
        return self.metrics["config"]

    @property
    def is_language_model(self) -> bool:
        return self.config.get("task") == "lm"

    @property
    def is_classifier(self) -> bool:
        """A ``task="classify"`` run (its ``metrics.json`` has the ``labels``)."""
        return self.config.get("task") == "classify"

    def load_model(self, compile: bool = True):
        """``model.keras``, loaded with ``safe_mode=True`` (``compile=False``: for
        inference only, without the optimizer)."""
        import keras

        import keras_seq._cross_backend_optimizers  # noqa: F401  (a run trained on PyTorch)
        import keras_seq.layers  # noqa: F401  (registers the classes for loading)
        import keras_seq.metrics  # noqa: F401
        import keras_seq.models  # noqa: F401

        return keras.saving.load_model(
            os.path.join(self.path, "model.keras"), safe_mode=True, compile=compile
        )

    def load_tokenizer(self):
        """The run's tokenizer (`keras_seq.text.load_tokenizer`)."""
        from keras_seq import text

        return text.load_tokenizer(self.path)

    def held_out_pairs(self, examples: int) -> list[tuple[str, str]]:
        """The first ``examples`` (source, target) pairs of the run's test split.

        Read from ``test.tsv``; a run written before that file existed gives
        the examples its ``metrics.json`` records (``examples`` and
        ``errors``), which may be none.
        """
        path = os.path.join(self.path, HELD_OUT_FILE)
        if os.path.isfile(path):
            from keras_seq import data

            return data.load_tsv(path, max_examples=examples)
        seen, pairs = set(), []
        for example in self.metrics.get("examples", []) + self.metrics.get("errors", []):
            if example["source"] not in seen:
                seen.add(example["source"])
                pairs.append((example["source"], example["target"]))
        return pairs[:examples]


    def held_out_labelled(self, examples: int) -> list[tuple[str, str]]:
        """The first ``examples`` (label, text) pairs of a classifier run's test
        split (``test.tsv``, `keras_seq.data.load_labelled_tsv`)."""
        from keras_seq import data

        return data.load_labelled_tsv(os.path.join(self.path, HELD_OUT_FILE))[:examples]

    def held_out_text(self) -> str | None:
        """The held-out text of a language-model run: ``test.txt``; for a run
        written before that file existed, the end of its data file
        (`keras_seq.data.split_text`) if the file is still there; else None."""
        path = os.path.join(self.path, HELD_OUT_TEXT_FILE)
        if os.path.isfile(path):
            with open(path, encoding="utf-8", newline="") as f:
                return f.read()
        source = self.metrics.get("data")
        if not source or not os.path.isfile(source):
            return None
        from keras_seq import data

        with open(source, encoding="utf-8", newline="") as f:
            return data.split_text(f.read())[1]


def read_run(run_dir, where: str, task: str | None = None) -> RunFolder:
    """Reads a run folder's ``metrics.json``; ``task``: ``"translate"``, ``"lm"``
    or ``"classify"``, the kind of run ``where`` needs.

    Raises:
        FileNotFoundError: ``run_dir`` has no ``metrics.json``.
        ValueError: ``metrics.json`` is not a run's, or the run is of another kind.
    """
    run_dir = os.fspath(run_dir)
    metrics_path = os.path.join(run_dir, "metrics.json")
    if not os.path.isfile(metrics_path):
        raise FileNotFoundError(
            f"{where}: {run_dir} is not a run folder: {metrics_path} does not exist (a run "
            "folder is written by `keras-seq train`)."
        )
    try:
        with open(metrics_path, encoding="utf-8") as f:
            metrics = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{where}: {metrics_path} is not valid JSON ({error}).") from None
    if not isinstance(metrics, dict) or not isinstance(metrics.get("config"), dict):
        raise ValueError(f"{where}: {metrics_path} has no `config`; is it a run's?")
    run = RunFolder(run_dir, metrics)
    if task is not None and run.config.get("task") == "bilm":
        raise ValueError(
            f"{where}: {run_dir} holds a bidirectional language model (keras-seq train --task "
            "bilm): load its model.keras and use keras_seq.models.contextual_embedder for "
            "contextual vectors; it neither translates nor generates."
        )
    if task is not None and task != "classify" and run.is_classifier:
        raise ValueError(
            f"{where}: {run_dir} holds a text classifier (keras-seq train --task classify); "
            "classify texts with classify_texts (keras-seq classify)."
        )
    if task == "classify" and not run.is_classifier:
        kind, use = (("language model", "generate_text (keras-seq generate)")
                     if run.is_language_model else
                     ("translation model", "translate_texts (keras-seq translate)"))
        raise ValueError(
            f"{where}: {run_dir} holds a {kind}, not a text classifier (train one with "
            f"task='classify'); use {use}."
        )
    if task == "translate" and run.is_language_model:
        raise ValueError(
            f"{where}: {run_dir} holds a language model (keras-seq train --task lm); sample "
            "from it with generate_text (keras-seq generate)."
        )
    if task == "lm" and not run.is_language_model:
        raise ValueError(
            f"{where}: {run_dir} holds a translation model, not a language model (train one "
            "with task='lm'); use translate_texts (keras-seq translate)."
        )
    if task == "translate":
        for key in ("source_length", "target_length"):
            if key not in run.config:
                raise ValueError(f"{where}: {metrics_path} has no config.{key}.")
    return run


def write_held_out(run_dir: str, pairs: Sequence[tuple[str, str]]) -> str:
    """Writes the held-out pairs of a translation run to ``run_dir/test.tsv``."""
    path = os.path.join(run_dir, HELD_OUT_FILE)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(f"{source}\t{target}\n" for source, target in pairs)
    return path


def write_held_out_text(run_dir: str, text: str) -> str:
    """Writes the held-out text of a language-model run to ``run_dir/test.txt``."""
    path = os.path.join(run_dir, HELD_OUT_TEXT_FILE)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    return path
