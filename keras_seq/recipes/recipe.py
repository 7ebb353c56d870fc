"""`Recipe`: how ``keras-seq`` trains, scores, exports and checks one task.

A recipe declares what a run of its task reads and writes: its options
(the `TrainingConfig` fields it takes beyond the common ones, and their
defaults), its data reader, the task model it builds (`keras_seq.tasks`),
its loss and metrics, what its run folder holds and how its exports are
written and checked. `train`, `export_run`, `verify` and the command line
ask the run's recipe, found by its ``task`` name in one registry
(`keras_seq.recipes.RECIPES`); nothing else branches on a task's name.

This module and the recipes import neither Keras nor TensorFlow: the
command line reads a recipe's options, defaults and data reader before it
loads TensorFlow (an argument error in well under a second). Their Keras
parts import when they run.
"""

from __future__ import annotations

import dataclasses

from keras_seq._validation import Arg, ArgumentValueError, Call, check_choice

__all__ = ["COMMON_OPTIONS", "Recipe", "RunResultWarning", "family_defaults", "listed", "needs",
           "no_beam"]

COMMON_OPTIONS = (
    "task", "model", "cell", "epochs", "batch_size", "learning_rate", "units", "layers", "out",
    "name", "seed", "distribute", "precision", "backup_every_steps", "fresh", "verbose",
)
"""The `TrainingConfig` fields of every task."""

FAMILY_KEYS = ("epochs", "batch_size", "learning_rate", "units", "layers")
"""The options whose defaults depend on the model family."""


CALIBRATION_EXAMPLES = 200
"""Examples of a run's training split that calibrate each integer export
file by default (``keras-seq export --calibration-examples``;
`Recipe.training_examples`, `keras_seq.export.calibration`)."""


class RunResultWarning(UserWarning):
    """A trained run's held-out result that its options explain (`Recipe.result_warnings`):
    ``keras-seq train`` prints it as ``keras-seq train: warning: ...``."""


class Recipe:
    """How ``keras-seq`` trains, scores, exports and checks the task ``name``.

    Subclasses set the class attributes and define the methods; the base
    gives the choice of model and cell, the family defaults, and the run
    folder's common files. See `keras_seq.recipes` for the registry.

    Attributes:
        name: the ``task`` (``keras-seq train --task NAME``).
        summary: one line for ``--help``.
        options: the `TrainingConfig` fields it takes besides `COMMON_OPTIONS`.
        models: its ``model`` choices, the default first.
        default_cell: its ``cell`` when none is given (None: no cell).
        run_prefix: the start of its run folders' default names.
        noun: what its runs hold (``"translation model"``).
        uses: the function that uses its runs (``"translate_texts"``).
        data: what ``data`` holds (``"source<TAB>target file."``).
        formats: the export formats it has; ``formats_described`` says what
            each writes, for a message (default: their names).
        recorded_sizes: the sizes its runs record in their ``config``
            (``source_length``, ...), which the commands read.
        command: the ``keras-seq`` command that applies its runs to texts
            (``RUN_DIR TEXT... | --input FILE``, `use`), or None;
            ``command_help`` and ``command_description`` its help.
    """

    name = ""
    summary = ""
    options: tuple[str, ...] = ()
    models: tuple[str, ...] = ("rnn",)
    default_cell: str | None = "gru"
    run_prefix = ""
    noun = ""
    uses = ""
    data = ""
    formats: tuple[str, ...] = ()
    formats_described = ""
    recorded_sizes: tuple[str, ...] = ()
    command: str | None = None
    command_help = ""
    command_description = ""

    # --- the options (no Keras) ---

    def family_defaults(self, model: str, cell: str | None) -> dict:
        """The defaults of `FAMILY_KEYS` (and the recipe's own defaults, such as
        ``context``) for ``model`` and ``cell``."""
        raise NotImplementedError(f"{type(self).__name__} must define family_defaults.")

    def resolve(self, config) -> dict:
        """The resolved values of ``config`` (its task set), checked: the model,
        the cell, and every option left None at its default. Subclasses add
        their own rules (`check`) and values."""
        where = "TrainingConfig"
        model = config.model if config.model is not None else self.models[0]
        check_choice(where, "model", model, self.models, expected=self._models_expected())
        cell = config.cell
        if cell is not None and not self.takes_cell(model):
            raise ArgumentValueError(
                where, Arg("cell", cell), " chooses the recurrent cell of ", Arg("model", "rnn"),
                "; ", Arg("model", model), " has none of its own to choose (leave ", Arg("cell"),
                " out)")
        if cell is not None:
            # The registry's names (a user's registered cell included): Keras loads here.
            from keras_seq.layers.recurrent.registry import cell_names

            check_choice(where, "cell", cell, cell_names())
        if cell is None and self.takes_cell(model):
            cell = self.default_cell
        defaults = self.family_defaults(model, config.cell)
        values = {key: getattr(config, key) if getattr(config, key) is not None else default
                  for key, default in defaults.items()}
        self.check(dataclasses.replace(config, model=model, cell=cell, **values))
        return {"model": model, "cell": cell, **values}

    def takes_cell(self, model: str) -> bool:
        """Whether ``model`` takes a recurrent ``cell``."""
        return model == "rnn"

    def check(self, config) -> None:
        """Rules between the recipe's options (the model and cell resolved)."""

    def _models_expected(self):
        models = ", ".join(map(repr, self.models))
        return (models if len(self.models) == 1 else f"one of {models}",
                " for ", Arg("task", self.name))

    def complete(self, config):
        """``config`` with what the run reads from elsewhere filled in before its
        data is read (a fine-tuned classifier: its language model's kind and
        sizes); by default unchanged."""
        return config

    def read(self, config):
        """The run's data, read and checked without TensorFlow (a bad file stops
        the run before anything is created)."""
        raise NotImplementedError(f"{type(self).__name__} must define read.")

    def result_line(self, metrics: dict) -> str:
        """What ``keras-seq train`` prints last, from the run's metrics."""
        raise NotImplementedError(f"{type(self).__name__} must define result_line.")

    # Epochs without a lower validation loss after which training stops and
    # the best epoch's weights are kept (`keras_seq.training.backup.BestEpoch`);
    # None: every epoch is trained and the last one's weights kept.
    early_stopping_patience: int | None = None

    def result_warnings(self, metrics: dict, config) -> list[str]:
        """What the run must say about its held-out result, one line each
        (`train` warns with each, `RunResultWarning`): a result its options
        explain. Default: nothing."""
        return []

    def default_formats(self, run) -> tuple[str, ...]:
        """The formats ``keras-seq export`` writes when none are given."""
        return self.formats

    def use(self, run_dir, texts) -> list[str]:
        """The lines `command` prints for ``texts`` by the run in ``run_dir``."""
        raise NotImplementedError(f"{type(self).__name__} must define use.")

    # --- a run's model (Keras) ---

    def prepare(self, config, loaded, replicas: int = 1):
        """The tokenizer and datasets the run trains on (``loaded``: `read`'s;
        ``replicas``: the strategy's replicas in sync)."""
        raise NotImplementedError(f"{type(self).__name__} must define prepare.")

    def notes(self, prepared, config) -> list[str]:
        """What the run says about its data before it trains."""
        return []

    def build(self, config, prepared):
        """The task (`keras_seq.tasks`) the run trains, with its preprocessor."""
        raise NotImplementedError(f"{type(self).__name__} must define build.")

    def trainer(self, task, config, prepared):
        """The model ``fit`` trains (default: the task itself)."""
        return task

    def compile(self, model, config, steps: int) -> None:
        """Compiles the trained model: Adam with warm-up and cosine decay on the
        recipe's loss (`keras_seq.training.model.compile_run`)."""
        raise NotImplementedError(f"{type(self).__name__} must define compile.")

    def score(self, task, prepared, config, replicas: int):
        """The held-out scores of the trained task, for the run folder
        (`keras_seq.run_folder.write_run`): ``(metrics, held_out,
        figures, recorded)``: the metrics, ``(file name, text)`` of the held-out
        data, ``{file name: draw(path)}`` of its figures, and the sizes
        recorded in its ``config`` (a source length, ...)."""
        raise NotImplementedError(f"{type(self).__name__} must define score.")

    def kept(self, task):
        """The model the run folder keeps of the trained task (default: the task)."""
        return task

    # --- its exports ---

    def training_examples(self, config) -> list:
        """The training split of a run of ``config`` (its recorded options,
        `keras_seq.run_config.recorded_config`), read again: the examples
        that calibrate its integer exports (`read`'s first part; a language
        model's training text)."""
        return self.read(config)[0]

    def export(self, run, out: str, formats, beam_width: int, quantize, examples: int,
               progress, calibration=None) -> tuple[dict, dict]:
        """Writes the run's artifacts into ``out``: ``(paths written, manifest)``;
        ``calibration`` (a `keras_seq.export.calibration.Calibration`)
        calibrates the integer files of ``quantize``."""
        raise NotImplementedError(f"{type(self).__name__} must define export.")


def no_beam(beam_width: int, what: str) -> None:
    """Refuses a beam width other than 1 for a run that decodes nothing with it
    (``what``: what its export holds instead)."""
    if beam_width != 1:
        raise ArgumentValueError(
            "export_run", Arg("beam_width"), " is for translation runs (the SavedModel's "
            f"decoding); {what}. Received ", Arg("beam_width", beam_width), ".")


def family_defaults(table: dict, model: str, keys=FAMILY_KEYS) -> dict:
    """``table[model]``'s values of ``keys``."""
    return {key: table[model][key] for key in keys if key in table[model]}


def needs(where: str, config, option: str, needed: str, needed_value, why: str) -> None:
    """Refuses ``option`` (set away from its default) unless ``needed`` is set
    (``needed_value`` None: to anything)."""
    value = getattr(config, option)
    default = _field_default(config, option)
    if value == default:
        return
    has = getattr(config, needed)
    if (has is not None) if needed_value is None else has == needed_value:
        return
    wanted = Arg(needed) if needed_value is None else Arg(needed, needed_value)
    raise ArgumentValueError(where, Arg(option, value), f" {why}: it needs ", wanted, ".")


def _field_default(config, name):
    for field in dataclasses.fields(config):
        if field.name == name:
            return field.default
    raise KeyError(name)


def listed(parts: list, last: str = " or ") -> list:
    """Message parts joined by commas, the last by ``last``."""
    out = []
    for i, part in enumerate(parts):
        if i:
            out.append(last if i == len(parts) - 1 else ", ")
        out.append(part)
    return out


def use_run(recipe: Recipe) -> list:
    """Message parts: what to do with a run of ``recipe`` (``use translate_texts``)."""
    return ["use ", Call(recipe.uses)]

