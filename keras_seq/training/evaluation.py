"""The end of a run: its held-out scores, and the run folder written with them.

`evaluate_and_save` asks the run's recipe (`keras_seq.recipes.Recipe.score`)
for its scores, held-out data and figures, and writes the run folder with
the one writer, `keras_seq.training.run_folder.write_run`. The scores the
recipes share are here: a language model's loss over a whole text
(`text_loss`, `bidirectional_text_loss`) and a classifier's
(`classification_scores`, `confusion_figure`).
"""

from __future__ import annotations

import time

from keras_seq import recipes
from keras_seq._backend import require_tensorflow
from keras_seq._validation import check_positive_int
from keras_seq.reserved_tokens import PAD_ID
from keras_seq.training.run_folder import write_run

__all__ = [
    "bidirectional_text_loss",
    "classification_scores",
    "confusion_figure",
    "evaluate_and_save",
    "scored_characters",
    "text_loss",
]

_EVALUATE_BATCH = 256


def evaluate_and_save(model, prepared, run_dir: str, config, seconds: dict, started: float,
                      replicas: int = 1, extra: dict | None = None,
                      recorded: dict | None = None) -> dict:
    """Scores a trained model on its held-out data and writes its run folder;
    returns the metrics.

    The run's recipe (`keras_seq.recipes`, by ``config.task``) scores it:
    held-out exact match of greedy decoding (translation), the loss over the
    whole held-out text (language models), accuracy and macro-F1 (a
    classifier); `keras_seq.training.run_folder.write_run` writes
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


def text_loss(model, ids, context: int, batch_size: int = _EVALUATE_BATCH) -> tuple[float, int]:
    """Mean cross-entropy (nats per character) of a language model over a whole text.

    The text is cut into consecutive windows of ``context + 1`` ids
    (`keras_seq.data.text_windows`): every id but the first is predicted
    once, from the preceding ids of its window, and the losses
    −log softmax(logits)[target] are summed in float64.

    Args:
        model: a `models.language_model` (or any model ids ``(B, T)`` ->
            logits ``(B, T, V)``).
        ids: ``(N,)`` int ids, N ≥ 2, no padding.
        context: int, the window length (the training length).
        batch_size: int, windows per forward pass.

    Returns:
        ``(mean loss, number of predicted ids)``; exp(mean loss) is the perplexity.
    """
    require_tensorflow("keras_seq.training.text_loss")
    import numpy as np
    import tensorflow as tf

    from keras_seq import data

    batch_size = check_positive_int("text_loss", "batch_size", batch_size)
    inputs, targets = data.text_windows(ids, context)

    @tf.function(input_signature=[tf.TensorSpec([None, context], tf.int32)] * 2)
    def summed_loss(x, y):
        log_p = tf.nn.log_softmax(tf.cast(model(x, training=False), tf.float32))
        loss = -tf.gather(log_p, y, batch_dims=2)  # (B, T)
        return tf.reduce_sum(tf.where(tf.not_equal(y, PAD_ID), loss, 0.0), axis=-1)

    total = 0.0
    for start in range(0, len(inputs), batch_size):
        window = slice(start, start + batch_size)
        total += float(np.sum(summed_loss(inputs[window], targets[window]).numpy(), dtype=np.float64))
    count = int(np.count_nonzero(targets))
    return total / count, count


def bidirectional_text_loss(model, ids, context: int, batch_size: int = _EVALUATE_BATCH) -> dict:
    """Forward and backward mean cross-entropy of a biLM over a whole text.

    The text is cut as in `text_loss` (windows of ``context`` inputs). The
    forward logits at t score id t + 1 (every id but the first once, from the
    ids before it in its window); the backward logits at t score id t − 1 of
    the window (from the ids at and after t in its window: every id but the
    last input of each window).

    Returns:
        ``{"forward": (mean loss, count), "backward": (mean loss, count)}``:
        nats per token, and the tokens scored.
    """
    require_tensorflow("keras_seq.training.bidirectional_text_loss")
    import numpy as np
    import tensorflow as tf

    from keras_seq import data

    batch_size = check_positive_int("bidirectional_text_loss", "batch_size", batch_size)
    inputs, targets = data.text_windows(ids, context)
    # Padding (the last window's end) predicts nothing.
    previous = np.where(inputs != PAD_ID, np.pad(inputs[:, :-1], ((0, 0), (1, 0))), PAD_ID)

    def summed(logits, y):
        log_p = tf.nn.log_softmax(tf.cast(logits, tf.float32))
        loss = -tf.gather(log_p, y, batch_dims=2)
        return tf.reduce_sum(tf.where(tf.not_equal(y, PAD_ID), loss, 0.0), axis=-1)

    @tf.function(input_signature=[tf.TensorSpec([None, context], tf.int32)] * 3)
    def summed_losses(x, forward, backward):
        logits = model(x, training=False)
        return summed(logits["forward"], forward), summed(logits["backward"], backward)

    totals = [0.0, 0.0]
    for start in range(0, len(inputs), batch_size):
        window = slice(start, start + batch_size)
        parts = summed_losses(inputs[window], targets[window], previous[window])
        for k, part in enumerate(parts):
            totals[k] += float(np.sum(part.numpy(), dtype=np.float64))
    counts = [int(np.count_nonzero(targets)), int(np.count_nonzero(previous))]
    return {
        "forward": (totals[0] / counts[0], counts[0]),
        "backward": (totals[1] / counts[1], counts[1]),
    }


def scored_characters(tokenizer, ids, context: int) -> tuple[int, int]:
    """The characters of the tokens that `bidirectional_text_loss` scores,
    forward and backward: each token counts the characters it detokenizes to
    (an ``[UNK]`` one, U+FFFD)."""
    import numpy as np

    from keras_seq import data

    every_id = [[i] for i in range(tokenizer.vocabulary_size)]
    lengths = np.array([len(s.decode("utf-8")) for s in tokenizer.detokenize(every_id).numpy()])
    # The same windows as the loss, of lengths instead of ids (no text token is empty).
    inputs, targets = data.text_windows(lengths[np.asarray(ids)], context)
    previous = np.where(inputs != 0, np.pad(inputs[:, :-1], ((0, 0), (1, 0))), 0)
    return int(targets.sum()), int(previous.sum())


def classification_scores(true_ids, predicted_ids, num_classes: int) -> dict:
    """Accuracy, macro-F1, the confusion matrix and per-class scores of predictions.

    Macro-F1 is the mean F1 over the classes that occur among the true or the
    predicted ids (scikit-learn's ``f1_score(average="macro")``); a class
    never predicted has precision 0, one never true recall 0.

    Args:
        true_ids: the true class ids, one per example.
        predicted_ids: the predicted class ids, in the same order.
        num_classes: the number of classes.

    Returns:
        ``{"accuracy", "macro_f1", "confusion_matrix" (rows: true class,
        columns: predicted), "precision", "recall", "f1", "support" (lists,
        one per class id)}``.

    Examples:
        >>> scores = classification_scores([0, 0, 1, 2], [0, 1, 1, 1], 3)
        >>> scores["accuracy"], round(scores["macro_f1"], 4), scores["confusion_matrix"]
        (0.5, 0.3889, [[1, 1, 0], [0, 1, 0], [0, 1, 0]])
    """
    import numpy as np

    true_ids, predicted_ids = np.asarray(true_ids), np.asarray(predicted_ids)
    confusion = np.zeros((num_classes, num_classes), np.int64)
    np.add.at(confusion, (true_ids, predicted_ids), 1)
    correct = np.diag(confusion).astype(np.float64)
    support, predicted = confusion.sum(axis=1), confusion.sum(axis=0)
    precision = np.divide(correct, predicted, out=np.zeros(num_classes), where=predicted > 0)
    recall = np.divide(correct, support, out=np.zeros(num_classes), where=support > 0)
    both = precision + recall
    f1 = np.divide(2 * precision * recall, both, out=np.zeros(num_classes), where=both > 0)
    present = (support > 0) | (predicted > 0)
    return {
        "accuracy": float(correct.sum() / max(1, len(true_ids))),
        "macro_f1": float(f1[present].mean()) if present.any() else 0.0,
        "confusion_matrix": confusion.tolist(),
        "precision": precision.tolist(),
        "recall": recall.tolist(),
        "f1": f1.tolist(),
        "support": support.tolist(),
    }


def confusion_figure(confusion, labels, path):
    """Draws the confusion matrix, with counts, rows the true labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    confusion = np.asarray(confusion)
    names = [label if len(label) <= 20 else label[:19] + "…" for label in labels]
    size = 1.2 + 0.45 * len(labels)
    fig, ax = plt.subplots(figsize=(size + 1.5, size))
    image = ax.imshow(confusion, cmap="Blues")
    for (i, j), count in np.ndenumerate(confusion):
        if count:
            light = count > confusion.max() / 2
            ax.text(j, i, str(count), ha="center", va="center", fontsize=8,
                    color="white" if light else "black")
    ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    accuracy = np.trace(confusion) / max(1, confusion.sum())
    ax.set_title(f"Test texts: {confusion.sum()}, accuracy {accuracy:.1%}", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
