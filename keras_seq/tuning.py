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
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import keras_tuner

from keras_seq import models
from keras_seq._validation import (
    check_float,
    check_positive_int,
    check_rate,
    check_selection,
    invalid_type,
    invalid_value,
)
from keras_seq.models._cells import CELL_NAMES
from keras_seq.reserved_tokens import PAD_ID

__all__ = ["ClassifierHyperModel", "Seq2SeqHyperModel"]

_ALL_CELLS = CELL_NAMES


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
        cells: cell types to choose from (``"gru"``, ``"lstm"``, ``"peephole"``,
            ``"coupled"``). Default all four.
        units: recurrent widths to choose from. Default ``(64, 128, 256)``.
        embedding_dims: embedding widths to choose from. Default ``(32, 64)``.
        attention: attention choices, ``"bahdanau"`` and/or ``"none"``.
            Default both.
        max_dropout: float in [0, 1), upper end of the dropout range (step
            0.1). Default 0.3.
        learning_rate: ``(low, high)`` bounds, sampled on a log scale.
            Default ``(1e-4, 1e-2)``.

    Example:

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
        cells: Sequence[str] = _ALL_CELLS,
        units: Sequence[int] = (64, 128, 256),
        embedding_dims: Sequence[int] = (32, 64),
        attention: Sequence[str] = ("bahdanau", "none"),
        max_dropout: float = 0.3,
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
        self.cells = check_selection(where, "cells", cells, _ALL_CELLS)
        self.units = _check_int_choices(where, "units", units)
        self.embedding_dims = _check_int_choices(where, "embedding_dims", embedding_dims)
        self.attention = check_selection(where, "attention", attention, ("bahdanau", "none"))
        self.max_dropout = check_rate(where, "max_dropout", max_dropout)
        self.learning_rate = _check_learning_rate(where, learning_rate)

    def build(self, hp: keras_tuner.HyperParameters) -> keras.Model:
        attention = hp.Choice("attention", self.attention)
        model = models.rnn_seq2seq(
            self.source_vocabulary_size,
            self.target_vocabulary_size,
            units=hp.Choice("units", self.units),
            embedding_dim=hp.Choice("embedding_dim", self.embedding_dims),
            cell=hp.Choice("cell", self.cells),
            attention=None if attention == "none" else attention,
            dropout=hp.Float("dropout", 0.0, self.max_dropout, step=0.1),
        )
        model.compile(
            optimizer=keras.optimizers.Adam(_learning_rate(hp, self.learning_rate)),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD_ID),
            metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        )
        return model


class ClassifierHyperModel(keras_tuner.HyperModel):
    """Search space over `models.sequence_classifier`: encoder kind, cell, sizes.

    Args:
        vocabulary_size: int, number of token ids (0 = padding).
        num_classes: int, number of classes.
        kinds: encoder kinds to choose from, ``"rnn"`` and/or ``"transformer"``.
            Default ``("rnn",)``.
        cells: recurrent cell types to choose from (used when kind is ``"rnn"``).
            Default all four.
        units: widths to choose from (for a Transformer each must be divisible
            by ``num_heads``). Default ``(32, 64, 128)``.
        max_layers: int, upper end of the encoder depth range. Default 2.
        num_heads: int, attention heads of the Transformer encoder. Default 4.
        max_dropout: float in [0, 1), upper end of the dropout range. Default 0.3.
        learning_rate: ``(low, high)`` bounds, log scale. Default ``(1e-4, 1e-2)``.

    Example:

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
        cells: Sequence[str] = _ALL_CELLS,
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
        self.cells = check_selection(where, "cells", cells, _ALL_CELLS)
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
        return model


def _check_learning_rate(where: str, bounds: tuple[float, float]) -> tuple[float, float]:
    expected = "(low, high) with 0 < low <= high"
    if isinstance(bounds, str) or not isinstance(bounds, Sequence) or len(bounds) != 2:
        raise invalid_type(where, "learning_rate", expected, bounds)
    low, high = (check_float(where, "learning_rate", b, low=0.0, low_inclusive=False) for b in bounds)
    if low > high:
        raise invalid_value(where, "learning_rate", expected, bounds)
    return low, high
