"""Recipes: what ``keras-seq`` does with each task, found by its name in one registry.

`RECIPES` maps each ``task`` name (``keras-seq train --task NAME``,
`keras_seq.training.TrainingConfig.task`) to its `Recipe`: its options and
defaults, its data reader, the `keras_seq.tasks` model it builds, its loss,
metrics and run-folder files, and its exports and their checks.
`keras_seq.training.train`, `keras_seq.export.export_run`,
`keras_seq.export.verify` and the command line dispatch through it:

- ``dates`` and ``translate``: `Translation` (a `keras_seq.tasks.Seq2SeqLM`);
- ``lm``: `LanguageModel` (a `keras_seq.tasks.CausalLM`);
- ``bilm``: `BidirectionalLanguageModel` (a `keras_seq.tasks.BidirectionalLM`);
- ``classify``: `Classification` (a `keras_seq.tasks.TextClassifier`);
- ``tag``: `Tagging` (a `keras_seq.tasks.SequenceTagger`).

A new task is a recipe (and the task model it builds) added here. The
recipes import neither Keras nor TensorFlow until they run.
"""

from __future__ import annotations

from keras_seq._validation import Arg, ArgumentValueError, Call, check_choice
from keras_seq.recipes.classification import Classification
from keras_seq.recipes.language_model import BidirectionalLanguageModel, LanguageModel
from keras_seq.recipes.recipe import COMMON_OPTIONS, Recipe, RunResultWarning
from keras_seq.recipes.tagging import Tagging
from keras_seq.recipes.translation import Translation

__all__ = ["COMMON_OPTIONS", "RECIPES", "Recipe", "RunResultWarning", "get", "load_data",
           "read_run", "recipe_of_run"]

RECIPES: dict[str, Recipe] = {
    recipe.name: recipe
    for recipe in (
        Translation("dates", pairs_file=False),
        Translation("translate", pairs_file=True),
        LanguageModel(),
        BidirectionalLanguageModel(),
        Classification(),
        Tagging(),
    )
}
"""Each task's recipe, by its name (`keras_seq.training.TrainingConfig.task`)."""


def get(task: str, where: str = "TrainingConfig") -> Recipe:
    """The recipe of ``task`` (a ``ValueError`` naming ``where`` for another name)."""
    return RECIPES[check_choice(where, "task", task, tuple(RECIPES))]


def recipe_of_run(config: dict) -> Recipe:
    """The recipe of a run from its recorded ``config`` (a run folder's
    ``metrics.json``)."""
    return get(config.get("task") or "dates", "read_run")


def read_run(run_dir, where: str, task: str | None = None):
    """A run folder (`keras_seq.run_folder.read_run`) whose task is
    of the kind ``where`` needs: ``task``'s (a task name: its runs are those
    whose recipe has the same use, ``"dates"`` and ``"translate"`` alike),
    with the sizes that recipe's runs record; None: any run.

    Raises:
        FileNotFoundError: ``run_dir`` has no ``metrics.json``.
        ValueError: ``metrics.json`` is not a run's, or the run is of another kind.
    """
    import os

    from keras_seq import run_folder

    run = run_folder.read_run(run_dir, where)
    if task is None:
        return run
    has, needed = recipe_of_run(run.config), get(task, where)
    if has.uses != needed.uses:
        raise ArgumentValueError(
            where, f"{run.path} holds a {has.noun} (", Arg("task", has.name), "), not a "
            f"{needed.noun}; use ", Call(has.uses), "."
        )
    for key in needed.recorded_sizes:
        if key not in run.config:
            raise ArgumentValueError(
                where, f"{os.path.join(run.path, 'metrics.json')} has no config.{key}.")
    return run


def load_data(config):
    """The data of a resolved `TrainingConfig`, read and checked in Python only (no
    TensorFlow op), so that `train` stops on bad data before it creates
    anything: its recipe's `Recipe.read`."""
    return RECIPES[config.task].read(config)
