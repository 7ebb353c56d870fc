"""The data of a run: read and checked in Python (`load_data`), then tokenized
into `tf.data` pipelines (`prepare_data`), each by the run's recipe
(`keras_seq.recipes`); a fine-tuning run's options are completed from its
language model's run folder first (`with_language_model`)."""

from __future__ import annotations

from keras_seq import recipes
from keras_seq.data.pipeline import data_sharding
from keras_seq.recipes import load_data
from keras_seq.recipes.classification import PreparedLabels, load_labelled, with_language_model
from keras_seq.recipes.language_model import PreparedText
from keras_seq.recipes.translation import PreparedData, length_buckets, load_pairs

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


def prepare_data(config, loaded: tuple | None = None, replicas: int = 1):
    """The data, tokenizer and datasets that `train` (and `tuning.search`) fit on.

    Args:
        config: a resolved `TrainingConfig` (`TrainingConfig.resolved`).
        loaded: what `load_data` returned for ``config``; None reads it.
        replicas: the strategy's replicas in sync.

    Returns:
        The recipe's prepared data: a `PreparedData` (translation), a
        `PreparedText` (language models) or a `PreparedLabels` (classifiers).
    """
    recipe = recipes.get(config.task)
    return recipe.prepare(config, loaded if loaded is not None else recipe.read(config), replicas)
