"""The end of a run: its held-out scores, and the run folder written with them.

`evaluate_and_save` asks the run's recipe (`keras_seq.recipes.Recipe.score`)
for its scores, held-out data and figures, and writes the run folder with
the one writer, `keras_seq.run_folder.write_run`. The scores the
recipes share are in `keras_seq.metrics`.
"""

from __future__ import annotations

import time

from keras_seq import recipes
from keras_seq._backend import require_tensorflow
from keras_seq.metrics import (
    bidirectional_text_loss,
    classification_scores,
    confusion_figure,
    scored_characters,
    text_loss,
)
from keras_seq.run_folder import write_run

__all__ = [
    "bidirectional_text_loss",
    "classification_scores",
    "confusion_figure",
    "evaluate_and_save",
    "scored_characters",
    "text_loss",
]


def evaluate_and_save(model, prepared, run_dir: str, config, seconds: dict, started: float,
                      replicas: int = 1, extra: dict | None = None,
                      recorded: dict | None = None) -> dict:
    """Scores a trained model on its held-out data and writes its run folder;
    returns the metrics.

    The run's recipe (`keras_seq.recipes`, by ``config.task``) scores it:
    held-out exact match of greedy decoding (translation), the loss over the
    whole held-out text (language models), accuracy and macro-F1 (a
    classifier); `keras_seq.run_folder.write_run` writes
    ``model.keras`` (the model the recipe keeps), the tokenizer files, the
    held-out data, the figures and ``metrics.json`` (its scores, ``seconds``,
    ``config`` and ``user_modules``).

    Args:
        model: the trained task (`keras_seq.tasks`).
        prepared: the prepared data it was trained on (the recipe's `prepare`).
        run_dir: an existing folder.
        config: the run's resolved `keras_seq.training.TrainingConfig`,
            recorded as ``metrics["config"]`` (``verbose`` left out) with the
            sizes the recipe adds (``source_length``, ...),
            ``vocabulary_size`` and ``parameters``.
        seconds: timings so far (``data``, ``train``); ``evaluate`` and
            ``total`` (since ``started``, a `time.perf_counter` value) are added.
        replicas: the strategy's replicas in sync.
        extra: further top-level entries of ``metrics.json`` (the recipe's
            scores win over an entry of the same name).
        recorded: further entries of its ``config`` (a search's choices).
    """
    import dataclasses

    require_tensorflow("keras_seq.training.evaluate_and_save")
    recipe = recipes.get(config.task)
    t_evaluate = time.perf_counter()
    kept = recipe.kept(model)  # what the run folder keeps, and what is scored
    metrics, held_out, figures, sizes = recipe.score(kept, prepared, config, replicas)
    options = {k: v for k, v in dataclasses.asdict(config).items() if k != "verbose"}
    metrics["config"] = {**options, **sizes, **(recorded or {}),
                         "vocabulary_size": prepared.tokenizer.vocabulary_size,
                         "parameters": kept.count_params()}
    for key, value in (extra or {}).items():
        metrics.setdefault(key, value)
    return write_run(run_dir, kept, prepared.tokenizer, metrics, held_out, figures,
                     seconds={**seconds, "evaluate": time.perf_counter() - t_evaluate},
                     started=started)
