"""A run folder: its one writer (`write_run`) and its one reader (`read_run`).

A run folder is what `keras_seq.training.train` (or `keras_seq.tuning.search`)
writes: ``metrics.json`` (with the run's ``config``), ``model.keras``, the
tokenizer files, and the held-out data the run was scored on (``test.tsv``,
``test.txt``), so that it is read back as it was, never drawn again from the
run's options.

``metrics.json`` also records ``user_modules``: the modules that define the
user classes of the model (`user_modules`), which `RunFolder.load_model`
imports before it loads ``model.keras``.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import warnings

from keras_seq._validation import ArgumentValueError, Explained
from keras_seq.folders import run_metrics_path

__all__ = [
    "HELD_OUT_FILE",
    "HELD_OUT_TEXT_FILE",
    "RunFolder",
    "SCRIPT_MODULE",
    "USER_MODULES_KEY",
    "UserModuleError",
    "read_run",
    "user_modules",
    "warn_about_script_classes",
    "write_run",
]

HELD_OUT_FILE = "test.tsv"
"""The held-out (test) pairs of a translation run, ``source<TAB>target`` lines."""
HELD_OUT_TEXT_FILE = "test.txt"
"""The held-out (test) text of a language-model run: the last 10% of its text."""
USER_MODULES_KEY = "user_modules"
"""The ``metrics.json`` entry that lists the modules of the model's user classes."""
SCRIPT_MODULE = "__main__"
"""The module of a class defined in the script being run, which no other process can import."""

# Classes from these packages load without a user's module.
_KNOWN_PACKAGES = frozenset({"builtins", "keras", "keras_seq", "tensorflow"})


class UserModuleError(Explained, ImportError):
    """A module that a run's model needs (``metrics.json``'s ``user_modules``)
    cannot be imported, or the run's classes came from a script.

    Attributes:
        name: the module.
        run_dir: the run folder.
    """

    def __init__(self, message: str, name: str, run_dir: str):
        super().__init__(None, message)
        self.name, self.run_dir = name, run_dir

    def __reduce__(self):
        return (UserModuleError, (self.render(), self.name, self.run_dir))


def _user_classes(model) -> list[type]:
    """The classes of ``model``, its layers and their sub-layers (a recurrent
    layer's cell, the cells of a `StackedRNNCells`, a wrapper's layer, ...)
    and of their initializers, regularizers and constraints, that are not
    Keras', TensorFlow's, Python's or this package's; in the order found."""
    import keras

    kinds = (keras.layers.Layer, keras.initializers.Initializer,
             keras.regularizers.Regularizer, keras.constraints.Constraint)
    found, seen, pending = [], set(), [model]
    while pending:
        obj = pending.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        cls = type(obj)
        if (cls.__module__ or "").split(".")[0] not in _KNOWN_PACKAGES and cls not in found:
            found.append(cls)
        if isinstance(obj, keras.layers.Layer):
            # A layer's attributes hold its sub-layers, directly or in lists and dicts.
            values = list(vars(obj).values())
            while values:
                value = values.pop()
                if isinstance(value, kinds):
                    pending.append(value)
                elif isinstance(value, (list, tuple)):
                    values.extend(value)
                elif isinstance(value, dict):
                    values.extend(value.values())
    return found


def user_modules(model) -> list[str]:
    """The modules (sorted) that define the user classes of ``model``: the
    classes of its layers, sub-layers and cells, at any depth, and of their
    initializers, regularizers and constraints, that are not Keras',
    TensorFlow's, Python's or keras_seq's. A class defined in the script
    being run gives `SCRIPT_MODULE` (``"__main__"``).

    A run records them in ``metrics.json`` (`USER_MODULES_KEY`), and
    `RunFolder.load_model` imports them before it loads the model.
    """
    return sorted({cls.__module__ for cls in _user_classes(model)})


def warn_about_script_classes(model, where: str) -> None:
    """Warns (`UserWarning`) when classes of ``model`` are defined in the
    script being run (module ``__main__``): the run works in this process,
    but no ``keras-seq`` command can import them to load it."""
    names = [cls.__name__ for cls in _user_classes(model) if cls.__module__ == SCRIPT_MODULE]
    if names:
        warnings.warn(
            f"{where}: {', '.join(names)} {'is' if len(names) == 1 else 'are'} defined in the "
            f"script being run (module {SCRIPT_MODULE}): this process can load the run, but "
            "keras-seq commands cannot import the script. Define the classes in a module (a "
            ".py file on PYTHONPATH) and import them from there.",
            UserWarning, stacklevel=2,
        )


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
    def user_modules(self) -> list[str]:
        """The modules that define the user classes of the run's model
        (``metrics["user_modules"]``; none for a run written before the entry).

        Raises:
            ValueError: the entry is not a list of module names.
        """
        modules = self.metrics.get(USER_MODULES_KEY, [])
        if not isinstance(modules, list) or not all(
            isinstance(m, str) and all(part.isidentifier() for part in m.split("."))
            for m in modules
        ):
            raise ArgumentValueError(
                None, f"{os.path.join(self.path, 'metrics.json')}: `{USER_MODULES_KEY}` must be "
                f"a list of module names, received {modules!r:.200}."
            )
        return modules

    def import_user_modules(self) -> None:
        """Imports `user_modules` (but ``__main__``), which register the run's classes.

        Raises:
            UserModuleError: a module cannot be imported (one line naming it
                and the run).
        """
        for name in self.user_modules:
            if name == SCRIPT_MODULE:
                continue
            try:
                importlib.import_module(name)
            except Exception as error:  # whatever the module raises, the user reads one line
                reason = f"{type(error).__name__}: {error}".replace("\n", " ")
                raise UserModuleError(
                    f"cannot import the module {name}, which defines classes of the model of "
                    f"the run {self.path} ({reason}); install it or add its folder to "
                    "PYTHONPATH.", name, self.path,
                ) from error

    def load_model(self, compile: bool = True):
        """``model.keras``, loaded with ``safe_mode=True`` (``compile=False``: for
        inference only, without the optimizer), once `import_user_modules` has
        imported the modules of its user classes.

        Raises:
            UserModuleError: a module of `user_modules` cannot be imported, or
                the model's classes were defined in the script that trained it
                and this process does not define them.
        """
        import keras

        # The package's classes (layers, tasks, metrics, the optimizers of a run
        # trained on PyTorch) are registered by importing keras_seq, which any
        # import of this module has done.
        self.import_user_modules()
        try:
            return keras.saving.load_model(
                os.path.join(self.path, "model.keras"), safe_mode=True, compile=compile
            )
        except TypeError as error:  # Keras: a class it cannot locate
            if SCRIPT_MODULE not in self.user_modules:
                raise
            raise UserModuleError(
                f"the model of the run {self.path} uses classes that were defined in the "
                f"script that trained it (module {SCRIPT_MODULE}), which this process does not "
                "define; move them into a module on PYTHONPATH and write its name in place of "
                f"{SCRIPT_MODULE} in the run's metrics.json ({USER_MODULES_KEY}).",
                SCRIPT_MODULE, self.path,
            ) from error

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


def read_run(run_dir, where: str) -> RunFolder:
    """Reads a run folder's ``metrics.json``, of any task
    (`keras_seq.recipes.read_run` also checks the task's kind;
    `keras_seq.tasks.from_run` loads its task).

    Raises:
        FileNotFoundError: ``run_dir`` has no ``metrics.json``.
        ValueError: ``metrics.json`` is not a run's.
    """
    run_dir = os.fspath(run_dir)
    metrics_path = run_metrics_path(run_dir, where)
    try:
        with open(metrics_path, encoding="utf-8") as f:
            metrics = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ArgumentValueError(where, f"{metrics_path} is not valid JSON ({error}).") from None
    if not isinstance(metrics, dict) or not isinstance(metrics.get("config"), dict):
        raise ArgumentValueError(where, f"{metrics_path} has no `config`; is it a run's?")
    return RunFolder(run_dir, metrics)


def write_run(run_dir: str, model, tokenizer, metrics: dict, held_out=None, figures=None,
              seconds: dict | None = None, started: float | None = None) -> dict:
    """Writes a run folder's files: the one writer of every task's runs.

    ``model.keras`` (the model, with its preprocessor), the tokenizer files
    (``vocab.txt``, ``tokenizer.json``), the held-out data (``held_out``:
    ``(file name, text)``), each figure (``figures``: ``{file name: draw(path)}``)
    and, last, ``metrics.json``: ``metrics``, with ``seconds`` (the run's
    timings; ``total`` since ``started``, a `time.perf_counter` value) and
    ``user_modules`` (`user_modules`). Returns the metrics written.
    """
    import time

    model.save(os.path.join(run_dir, "model.keras"))
    tokenizer.save(run_dir)
    if held_out is not None:
        name, text = held_out
        with open(os.path.join(run_dir, name), "w", encoding="utf-8", newline="") as f:
            f.write(text)
    for name, draw in (figures or {}).items():
        draw(os.path.join(run_dir, name))
    if seconds is not None:
        timings = {k: round(v, 2) for k, v in seconds.items()}
        if started is not None:
            timings["total"] = round(time.perf_counter() - started, 2)
        metrics["seconds"] = timings
    metrics[USER_MODULES_KEY] = user_modules(model)
    with open(os.path.join(run_dir, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(metrics, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return metrics
