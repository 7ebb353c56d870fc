"""KerasTuner search spaces over keras-seq's cell types and sizes.

Each hypermodel wraps one model builder of `keras_seq.models` and compiles the
model it builds, so it plugs straight into any `keras_tuner` tuner:

    tuner = keras_tuner.RandomSearch(
        Seq2SeqHyperModel(source_vocabulary_size=40, target_vocabulary_size=15),
        objective="val_loss", max_trials=10)
    tuner.search(train_ds, validation_data=val_ds, epochs=2)

The hyperparameter names are stable (``cell``, ``units``, ``embedding_dim``,
``attention``, ``dropout``, ``learning_rate`` for seq2seq; ``kind``, ``cell``,
``units``, ``num_layers``, ``dropout``, ``learning_rate`` for classifiers), so
a search can be narrowed with `keras_tuner.HyperParameters.Fixed` before it
starts.

`search` is the whole job behind ``keras-seq tune``: the data and tokenizer
of `keras_seq.training`, a KerasTuner search over `Seq2SeqHyperModel`, and the
best model saved as a run folder that ``keras-seq translate``, ``export`` and
``verify`` accept.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
import warnings
from collections.abc import Sequence
from typing import Any

import keras
import keras_tuner

from keras_seq import models, recipes, training
from keras_seq._backend import START_UNDER_TENSORFLOW, require_tensorflow
from keras_seq._validation import (
    Arg,
    ExistingFileError,
    check_choice,
    check_float,
    check_positive_int,
    check_rate,
    check_selection,
    invalid_type,
    invalid_value,
)
from keras_seq.layers.recurrent.registry import cell_names
from keras_seq.recipes.translation import Translation
from keras_seq.reserved_tokens import PAD_ID
from keras_seq.run_config import SEARCH_EMBEDDING_DIMS, SEARCH_UNITS, TUNE_ATTENTIONS, TUNERS
from keras_seq.run_folder import warn_about_script_classes
from keras_seq.training.locking import folder_lock

__all__ = ["TUNERS", "ClassifierHyperModel", "SearchResult", "Seq2SeqHyperModel", "search"]


def _check_cells(where: str, cells: Sequence[str] | None) -> list[str]:
    """``cells`` among the registered names (None: all of them, read now, so
    that a cell registered after this module was imported is searched too)."""
    return check_selection(where, "cells", cell_names() if cells is None else cells,
                           cell_names())


def _check_int_choices(where: str, name: str, values: Sequence[int]) -> list[int]:
    """A non-empty list of positive integers (NumPy integers accepted)."""
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise invalid_type(where, name, "a sequence of positive integers", values)
    if not values:
        raise invalid_value(where, name, "at least one positive integer", values)
    return [check_positive_int(where, name, v) for v in values]


def _learning_rate(hp: keras_tuner.HyperParameters, bounds: tuple[float, float]) -> float:
    return hp.Float("learning_rate", bounds[0], bounds[1], sampling="log")


class Seq2SeqHyperModel(keras_tuner.HyperModel):
    """Search space over `models.rnn_seq2seq`: cell type, widths, attention, dropout.

    Builds an attentive recurrent encoder-decoder (Bahdanau et al., 2015) and
    compiles it with Adam and a padding-masked sparse cross-entropy on logits,
    the loss `keras-seq train` uses, so trial scores are comparable with it.

    Args:
        source_vocabulary_size: int, number of source token ids.
        target_vocabulary_size: int, number of target token ids.
        cells: cell types to choose from, names of the cell registry
            (`keras_seq.models.register_cell`: ``"gru"``, ``"lstm"``,
            ``"peephole"``, ...). None (default): every registered cell.
        units: recurrent widths to choose from. Default ``(64, 128, 256)``.
        embedding_dims: embedding widths to choose from. Default ``(32, 64)``.
        attention: attention choices among ``"bahdanau"``, ``"luong"`` and
            ``"none"``. Default all three.
        max_dropout: float in [0, 1), upper end of the dropout range (step
            0.1). Default 0.3.
        zoneout: zoneout rates to choose from (the hyperparameter
            ``zoneout``, searched only when there is a choice or a rate above
            0). Default ``(0.0,)``: none.
        learning_rate: ``(low, high)`` bounds, sampled on a log scale.
            Default ``(1e-4, 1e-2)``.

    Examples:
        >>> hypermodel = Seq2SeqHyperModel(20, 15, cells=("gru",), units=(8,),
        ...                                embedding_dims=(4,))
        >>> model = hypermodel.build(keras_tuner.HyperParameters())
        >>> model.optimizer.__class__.__name__
        'Adam'
    """

    def __init__(
        self,
        source_vocabulary_size: int,
        target_vocabulary_size: int,
        cells: Sequence[str] | None = None,
        units: Sequence[int] = SEARCH_UNITS,
        embedding_dims: Sequence[int] = SEARCH_EMBEDDING_DIMS,
        attention: Sequence[str] = ("bahdanau", "luong", "none"),
        max_dropout: float = 0.3,
        zoneout: Sequence[float] = (0.0,),
        learning_rate: tuple[float, float] = (1e-4, 1e-2),
        **kwargs,
    ):
        super().__init__(**kwargs)
        where = "Seq2SeqHyperModel"
        self.source_vocabulary_size = check_positive_int(
            where, "source_vocabulary_size", source_vocabulary_size
        )
        self.target_vocabulary_size = check_positive_int(
            where, "target_vocabulary_size", target_vocabulary_size
        )
        self.cells = _check_cells(where, cells)
        self.units = _check_int_choices(where, "units", units)
        self.embedding_dims = _check_int_choices(where, "embedding_dims", embedding_dims)
        self.attention = check_selection(where, "attention", attention, TUNE_ATTENTIONS)
        self.zoneout = [check_rate(where, "zoneout", z) for z in zoneout] or [0.0]
        self.max_dropout = check_rate(where, "max_dropout", max_dropout)
        self.learning_rate = _check_learning_rate(where, learning_rate)

    def build(self, hp: keras_tuner.HyperParameters) -> keras.Model:
        attention = hp.Choice("attention", self.attention)
        cell = hp.Choice("cell", self.cells)
        zoneout = 0.0
        if len(self.zoneout) > 1 or self.zoneout[0] > 0.0:
            zoneout = hp.Choice("zoneout", self.zoneout)
        model = models.rnn_seq2seq(
            self.source_vocabulary_size,
            self.target_vocabulary_size,
            units=hp.Choice("units", self.units),
            embedding_dim=hp.Choice("embedding_dim", self.embedding_dims),
            cell=cell,
            attention=None if attention == "none" else attention,
            dropout=hp.Float("dropout", 0.0, self.max_dropout, step=0.1),
            zoneout=zoneout,
        )
        model.compile(
            optimizer=keras.optimizers.Adam(_learning_rate(hp, self.learning_rate)),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD_ID),
            metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        )
        training.build_optimizer(model)  # else each trial traces its train step twice
        return model


class ClassifierHyperModel(keras_tuner.HyperModel):
    """Search space over `models.sequence_classifier`: encoder kind, cell, sizes.

    Args:
        vocabulary_size: int, number of token ids (0 = padding).
        num_classes: int, number of classes.
        kinds: encoder kinds to choose from, ``"rnn"`` and/or ``"transformer"``.
            Default ``("rnn",)``.
        cells: recurrent cell types to choose from (used when kind is ``"rnn"``).
            None (default): every registered cell, as `Seq2SeqHyperModel`.
        units: widths to choose from (for a Transformer each must be divisible
            by ``num_heads``). Default ``(32, 64, 128)``.
        max_layers: int, upper end of the encoder depth range. Default 2.
        num_heads: int, attention heads of the Transformer encoder. Default 4.
        max_dropout: float in [0, 1), upper end of the dropout range. Default 0.3.
        learning_rate: ``(low, high)`` bounds, log scale. Default ``(1e-4, 1e-2)``.

    Examples:
        >>> hypermodel = ClassifierHyperModel(30, 3, cells=("peephole",), units=(8,))
        >>> model = hypermodel.build(keras_tuner.HyperParameters())
        >>> tuple(model.output.shape)
        (None, 3)
    """

    def __init__(
        self,
        vocabulary_size: int,
        num_classes: int,
        kinds: Sequence[str] = ("rnn",),
        cells: Sequence[str] | None = None,
        units: Sequence[int] = (32, 64, 128),
        max_layers: int = 2,
        num_heads: int = 4,
        max_dropout: float = 0.3,
        learning_rate: tuple[float, float] = (1e-4, 1e-2),
        **kwargs,
    ):
        super().__init__(**kwargs)
        where = "ClassifierHyperModel"
        self.vocabulary_size = check_positive_int(where, "vocabulary_size", vocabulary_size)
        self.num_classes = check_positive_int(where, "num_classes", num_classes)
        self.kinds = check_selection(where, "kinds", kinds, ("rnn", "transformer"))
        self.cells = _check_cells(where, cells)
        self.units = _check_int_choices(where, "units", units)
        self.max_layers = check_positive_int(where, "max_layers", max_layers)
        self.num_heads = check_positive_int(where, "num_heads", num_heads)
        if "transformer" in self.kinds and any(u % self.num_heads for u in self.units):
            raise invalid_value(
                where,
                "units",
                f"widths divisible by num_heads={self.num_heads} for a Transformer encoder",
                self.units,
            )
        self.max_dropout = check_rate(where, "max_dropout", max_dropout)
        self.learning_rate = _check_learning_rate(where, learning_rate)

    def build(self, hp: keras_tuner.HyperParameters) -> keras.Model:
        kind = hp.Choice("kind", self.kinds)
        with hp.conditional_scope("kind", ["rnn"]):
            cell = hp.Choice("cell", self.cells) if kind == "rnn" else "gru"
        model = models.sequence_classifier(
            self.vocabulary_size,
            self.num_classes,
            kind=kind,
            units=hp.Choice("units", self.units),
            cell=cell,
            num_layers=hp.Int("num_layers", 1, self.max_layers),
            num_heads=self.num_heads,
            dropout=hp.Float("dropout", 0.0, self.max_dropout, step=0.1),
        )
        model.compile(
            optimizer=keras.optimizers.Adam(_learning_rate(hp, self.learning_rate)),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        )
        training.build_optimizer(model)  # else each trial traces its train step twice
        return model


def _check_learning_rate(where: str, bounds: tuple[float, float]) -> tuple[float, float]:
    expected = "(low, high) with 0 < low <= high"
    if isinstance(bounds, str) or not isinstance(bounds, Sequence) or len(bounds) != 2:
        raise invalid_type(where, "learning_rate", expected, bounds)
    low, high = (check_float(where, "learning_rate", b, low=0.0, low_inclusive=False) for b in bounds)
    if low > high:
        raise invalid_value(where, "learning_rate", expected, bounds)
    return low, high


# ---------------------------------------------------------------------------
# The search behind `keras-seq tune`


@dataclasses.dataclass
class SearchResult:
    """What `search` returns.

    Attributes:
        best_hyperparameters: the best trial's values (``cell``, ``units``,
            ``embedding_dim``, ``attention``, ``dropout``, ``learning_rate``;
            Hyperband adds its ``tuner/epochs``, ``tuner/round``, ...).
        run_dir: the run folder written for the best model.
        metrics: the content of its ``metrics.json``.
        tuner: the `keras_tuner.Tuner` after the search (its trials, oracle,
            ``results_summary()``).
        model: the best trial's model.
        tokenizer: the `keras_seq.text.CharTokenizer` of sources and targets.
    """

    best_hyperparameters: dict
    run_dir: str
    metrics: dict
    tuner: Any
    model: Any
    tokenizer: Any


def search(
    config: training.TrainingConfig | None = None,
    trials: int = 10,
    tuner: str = "random",
    cells: Sequence[str] | None = None,
    units: Sequence[int] | None = None,
    embedding_dims: Sequence[int] | None = None,
    attention: Sequence[str] | None = None,
    **options,
) -> SearchResult:
    """Searches `Seq2SeqHyperModel` on a translation task and saves the best model (``keras-seq tune``).

    The data, tokenizer and datasets are `keras_seq.training.prepare_data`'s
    (the date task by default, or ``data=FILE.tsv``); each trial trains for
    ``epochs`` epochs with the hypermodel's Adam and is scored by its
    ``val_loss``. The best trial's model is then decoded on the test split and
    saved with `keras_seq.training.evaluate_and_save`: ``OUT/NAME/`` holds the
    files of a ``keras-seq train`` run (``model.keras``, the tokenizer files,
    ``logs/`` with one TensorBoard folder per trial, ``metrics.json``,
    ``attention.png`` when the best model has attention) and ``search/``,
    KerasTuner's trials. ``metrics.json``'s ``config`` records the best
    hyperparameters as ``cell``, ``units``, ``attention``, ``learning_rate``,
    ``embedding_dim`` and ``dropout``, and its ``search`` entry the tuner, the
    trials run and the best score; ``config.search_space`` the choices given
    and ``seconds.train`` the whole search.

    Args:
        config: a `keras_seq.training.TrainingConfig` for the data options
            (``data``, sizes, lengths, ``epochs``, ``batch_size``, ``out``,
            ``name``, ``seed``, ``distribute``, ``verbose``); its ``cell``,
            ``units``, ``attention`` and ``learning_rate`` are searched
            instead. Default ``TrainingConfig()``.
        trials: int, the most trials (models) to train.
        tuner: ``"random"`` (`keras_tuner.RandomSearch`), ``"bayesian"``
            (`keras_tuner.BayesianOptimization`) or ``"hyperband"``
            (`keras_tuner.Hyperband` with ``max_epochs=epochs``, stopped after
            ``trials`` trials).
        cells: cell types to search (`Seq2SeqHyperModel`'s ``cells``); None
            keeps its default, and so for the next three.
        units: recurrent widths to search.
        embedding_dims: embedding widths to search.
        attention: attention choices to search, ``"bahdanau"`` and/or ``"none"``.
        **options: `TrainingConfig` fields that replace those of ``config``.

    Returns:
        A `SearchResult`.

    Raises:
        ValueError, TypeError: a bad option (naming it), ``model`` other than
            ``"rnn"``, or ``distribute="multi_worker"``, which KerasTuner does
            not support (keras-team/keras-tuner#910).
        FileExistsError: ``OUT/NAME`` holds a finished run and ``fresh`` is
            False (``fresh=True`` searches again and replaces it).
        FolderInUseError: another process writes ``OUT/NAME``.
    """
    require_tensorflow("keras_seq.tuning.search", START_UNDER_TENSORFLOW)
    from keras_seq.distribute import choose_strategy

    t_start = time.perf_counter()
    where = "search"
    trials = check_positive_int(where, "trials", trials)
    check_choice(where, "tuner", tuner, TUNERS)
    config = dataclasses.replace(config or training.TrainingConfig(), **options).resolved()
    if not isinstance(recipes.get(config.task), Translation):
        raise invalid_value(
            where, "task", "'dates' or 'translate' (the search space is Seq2SeqHyperModel's)",
            config.task,
        )
    if config.model != "rnn":
        raise invalid_value(
            where, "model", "'rnn' (the search space is Seq2SeqHyperModel's)", config.model
        )
    # "auto" resolves as for `train`; a TF_CONFIG cluster makes it multi_worker.
    distribute = choose_strategy() if config.distribute == "auto" else config.distribute
    if distribute == "multi_worker":
        raise invalid_value(
            where,
            "distribute",
            "'none', 'auto' or 'mirrored': KerasTuner does not support MultiWorkerMirroredStrategy "
            "(keras-team/keras-tuner#910); run a search per machine instead",
            config.distribute,
        )
    space = {
        key: value
        for key, value in (
            ("cells", cells), ("units", units), ("embedding_dims", embedding_dims),
            ("attention", attention),
        )
        if value is not None
    }
    Seq2SeqHyperModel(1, 1, **space)  # checks the choices before any work

    name = config.name or f"tune-{tuner}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = os.path.join(config.out, name)
    with folder_lock(run_dir, "tune"):
        return _search_in_folder(
            config, run_dir, space, tuner, trials, distribute, t_start
        )


def _search_in_folder(config, run_dir, space, tuner, trials, distribute, t_start):
    import tensorflow as tf

    from keras_seq.distribute import make_strategy

    if os.path.isfile(os.path.join(run_dir, "metrics.json")):
        if not config.fresh:
            raise ExistingFileError(
                "search", f"{run_dir} already holds a finished run (metrics.json); pass ",
                Arg("fresh", True), " to search again and replace it, or choose another ",
                Arg("name"), "."
            )
        shutil.rmtree(os.path.join(run_dir, "logs"), ignore_errors=True)
    keras.utils.set_random_seed(config.seed)
    prepared = training.prepare_data(config)
    vocabulary_size = prepared.tokenizer.vocabulary_size
    hypermodel = Seq2SeqHyperModel(vocabulary_size, vocabulary_size, **space)
    os.makedirs(run_dir, exist_ok=True)
    t_data = time.perf_counter()

    strategy = None if distribute == "none" else make_strategy(distribute)
    common = dict(
        objective="val_loss",
        seed=config.seed,
        directory=run_dir,
        project_name="search",
        overwrite=True,  # a finished run was refused above unless `fresh`
        distribution_strategy=strategy,
    )
    if tuner == "hyperband":
        search_tuner = keras_tuner.Hyperband(hypermodel, max_epochs=config.epochs, **common)
        search_tuner.oracle.max_trials = trials  # Hyperband has no max_trials argument
    elif tuner == "bayesian":
        search_tuner = keras_tuner.BayesianOptimization(hypermodel, max_trials=trials, **common)
    else:
        search_tuner = keras_tuner.RandomSearch(hypermodel, max_trials=trials, **common)
    search_tuner.search(
        prepared.train_data,
        validation_data=prepared.validation_data,
        epochs=config.epochs,
        shuffle=False,  # the dataset reshuffles itself each epoch
        callbacks=[keras.callbacks.TensorBoard(os.path.join(run_dir, "logs"))],
        verbose=config.fit_verbosity,
    )
    t_search = time.perf_counter()

    best_trial = search_tuner.oracle.get_best_trials(1)[0]
    best = dict(best_trial.hyperparameters.values)
    with warnings.catch_warnings():
        # The tuner rebuilds the model with an unbuilt optimizer and loads the
        # trial's weights into it; Keras warns that it skips the optimizer's.
        warnings.filterwarnings("ignore", "Skipping variable loading for optimizer")
        model = search_tuner.get_best_models(1)[0]
    warn_about_script_classes(model, "search")
    with (strategy or tf.distribute.get_strategy()).scope():
        # A fresh optimizer state, saved complete so that loading the run is silent.
        model.optimizer.build(model.trainable_variables)
    from keras_seq.tasks import Seq2SeqLMPreprocessor

    model.preprocessor = Seq2SeqLMPreprocessor(prepared.tokenizer, prepared.source_length,
                                               prepared.target_length)
    best_config = dataclasses.replace(
        config, cell=best["cell"], units=best["units"], attention=best["attention"],
        learning_rate=best["learning_rate"])
    metrics = training.evaluate_and_save(
        model,
        prepared,
        run_dir,
        best_config,
        seconds={"data": t_data - t_start, "train": t_search - t_data},
        started=t_start,
        replicas=strategy.num_replicas_in_sync if strategy else 1,
        extra={
            "search": {
                "tuner": tuner,
                "objective": "val_loss",
                "trials": len(search_tuner.oracle.trials),
                "best_trial": best_trial.trial_id,
                "best_score": float(best_trial.score),
                "best_hyperparameters": best,
            }
        },
        recorded={
            "embedding_dim": best["embedding_dim"],
            "dropout": best["dropout"],
            "trials": trials,
            "tuner": tuner,
            "search_space": {key: list(value) for key, value in space.items()},
        },
    )
    return SearchResult(best, run_dir, metrics, search_tuner, model, prepared.tokenizer)
