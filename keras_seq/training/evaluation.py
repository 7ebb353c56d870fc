"""The end of a run: scoring the trained model and writing the run folder's files."""

from __future__ import annotations

import json
import os
import time

from keras_seq._backend import require_tensorflow
from keras_seq._validation import check_positive_int
from keras_seq.reserved_tokens import PAD_ID, START_ID, UNK_ID
from keras_seq.training.inference import class_probabilities, make_decoder, translate_strings
from keras_seq.training.prepare import PreparedData, PreparedLabels, PreparedText
from keras_seq.training.run_folder import (
    USER_MODULES_KEY,
    user_modules,
    write_held_out,
    write_held_out_text,
)

__all__ = [
    "classification_scores",
    "evaluate_and_save",
    "evaluate_classifier_and_save",
    "evaluate_text_and_save",
    "text_loss",
]

_EVALUATE_BATCH = 256


def _timings(seconds: dict, evaluate: float, total: float) -> dict:
    """``metrics["seconds"]``: the run's timings so far, then ``evaluate`` and ``total``."""
    return {**{k: round(v, 2) for k, v in seconds.items()}, "evaluate": round(evaluate, 2),
            "total": round(total, 2)}


def _write_metrics(run_dir: str, metrics: dict) -> None:
    with open(os.path.join(run_dir, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(metrics, f, indent=2, ensure_ascii=False)
        f.write("\n")


def _recorded_config(config: dict, **added) -> dict:
    """``metrics["config"]``: the run's options (``verbose`` left out) and ``added``."""
    return {**{k: v for k, v in config.items() if k != "verbose"}, **added}


def evaluate_and_save(
    model,
    prepared: PreparedData,
    run_dir: str,
    config: dict,
    seconds: dict,
    started: float,
    replicas: int = 1,
    attention: bool = True,
    extra: dict | None = None,
) -> dict:
    """Decodes the test split greedily and writes the run folder's files; returns the metrics.

    Writes ``model.keras``, the tokenizer files, ``test.tsv`` (the test
    pairs, `keras_seq.training.run_folder`), ``attention.png`` (when
    ``attention``) and ``metrics.json`` (see the module docstring) to ``run_dir``.

    Args:
        model: the trained seq2seq model.
        prepared: the `prepare_data` it was trained on.
        run_dir: an existing folder.
        config: the run's options, recorded as ``metrics["config"]`` with
            ``source_length``, ``target_length``, ``vocabulary_size`` and
            ``parameters`` added (``verbose`` left out).
        seconds: timings so far (``data``, ``train``); ``evaluate`` and
            ``total`` (since ``started``, a `time.perf_counter` value) are added.
        replicas: the strategy's replicas in sync.
        attention: draw ``attention.png``.
        extra: further top-level entries of ``metrics.json``.
    """
    require_tensorflow("keras_seq.training.evaluate_and_save")
    t_decode = time.perf_counter()
    tokenizer, test_pairs = prepared.tokenizer, prepared.test_pairs
    source_length, target_length = prepared.source_length, prepared.target_length
    decode = make_decoder(model, source_length, target_length)
    sources = [s for s, _ in test_pairs]
    outputs = translate_strings(decode, tokenizer, sources, source_length)
    t_eval = time.perf_counter()

    model.save(os.path.join(run_dir, "model.keras"))
    tokenizer.save(run_dir)
    write_held_out(run_dir, test_pairs)
    if attention:
        _attention_figure(
            model, tokenizer, sources[:3], outputs[:3], source_length, target_length,
            os.path.join(run_dir, "attention.png"),
        )
    t_end = time.perf_counter()

    correct = sum(o == t for o, (_, t) in zip(outputs, test_pairs))
    rows = [{"source": s, "target": t, "output": o} for (s, t), o in zip(test_pairs, outputs)]
    metrics = {
        "test_exact_match": correct / len(test_pairs),
        "replicas": replicas,
        "test_examples": len(test_pairs),
        "test_correct": correct,
        "train_examples": len(prepared.train_pairs),
        "decoding": "greedy",
        "seconds": _timings(seconds, t_eval - t_decode, t_end - started),
        "examples": rows[:5],
        "errors": [row for row in rows if row["output"] != row["target"]][:50],
        "config": _recorded_config(
            config, source_length=source_length, target_length=target_length,
            vocabulary_size=tokenizer.vocabulary_size, parameters=model.count_params(),
        ),
        USER_MODULES_KEY: user_modules(model),
        **(extra or {}),
    }
    _write_metrics(run_dir, metrics)
    return metrics


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


def _scored_characters(tokenizer, ids, context: int) -> tuple[int, int]:
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


def evaluate_text_and_save(
    model,
    prepared: PreparedText,
    run_dir: str,
    config: dict,
    seconds: dict,
    started: float,
    replicas: int = 1,
    extra: dict | None = None,
) -> dict:
    """Scores a language model on the whole held-out text and writes its run folder.

    Writes ``model.keras``, the tokenizer files, the held-out text
    (``test.txt``) and ``metrics.json``:
    ``val_loss`` (`text_loss` of the held-out ids with the training
    ``context``), ``val_perplexity`` = exp(``val_loss``), ``loss_unit``
    (``"nats per character"``, or ``"nats per token"`` for a WordPiece
    tokenizer), ``val_characters`` (the predicted characters: all held-out
    characters but the first), ``val_tokens`` (the predicted tokens),
    ``train_characters``, ``train_tokens``, ``steps``, ``seconds``,
    ``config`` (as `evaluate_and_save`) and ``user_modules`` (`user_modules`),
    plus ``extra``. A biLM's run
    (``task="bilm"``) also gets ``val_forward_loss`` and
    ``val_backward_loss`` (`bidirectional_text_loss`), their perplexities,
    ``val_backward_tokens``, ``val_backward_characters`` (the characters of
    the tokens each direction scores), ``val_forward_loss_per_character``
    and ``val_backward_loss_per_character`` (each direction's summed nats
    over those characters: equal to the per-token losses for characters, and
    what compares a WordPiece run with a character one),
    ``val_loss_per_character`` (their mean) and ``val_unknown_tokens``; its
    ``val_loss`` is the mean of the two per-token losses.
    """
    require_tensorflow("keras_seq.training.evaluate_text_and_save")
    import math

    t_evaluate = time.perf_counter()
    ids, tokenizer = prepared.held_out_ids, prepared.tokenizer
    if prepared.bidirectional:
        losses = bidirectional_text_loss(model, ids, prepared.context)
        (forward, count), (backward, backward_count) = losses["forward"], losses["backward"]
        characters, backward_characters = _scored_characters(tokenizer, ids, prepared.context)
        forward_per_character = forward * count / characters
        backward_per_character = backward * backward_count / backward_characters
        val_loss = (forward + backward) / 2
        extra = {
            "val_forward_loss": forward,
            "val_backward_loss": backward,
            "val_forward_perplexity": math.exp(forward),
            "val_backward_perplexity": math.exp(backward),
            "val_backward_tokens": backward_count,
            "val_backward_characters": backward_characters,
            "val_forward_loss_per_character": forward_per_character,
            "val_backward_loss_per_character": backward_per_character,
            "val_loss_per_character": (forward_per_character + backward_per_character) / 2,
            "val_unknown_tokens": int((ids == UNK_ID).sum()),
            **(extra or {}),
        }
    else:
        val_loss, count = text_loss(model, ids, prepared.context)
        characters = count  # a character language model
    t_eval = time.perf_counter()
    model.save(os.path.join(run_dir, "model.keras"))
    tokenizer.save(run_dir)
    write_held_out_text(run_dir, prepared.held_out_text)
    t_end = time.perf_counter()
    wordpiece = config.get("tokenizer") == "wordpiece"
    metrics = {
        "task": "bilm" if prepared.bidirectional else "lm",
        "val_loss": val_loss,
        "val_perplexity": math.exp(val_loss),
        "loss_unit": "nats per token" if wordpiece else "nats per character",
        "val_characters": characters,
        "val_tokens": count,
        "train_characters": prepared.train_characters,
        "train_tokens": int(len(prepared.train_ids)),
        "steps": int(config["epochs"]) * prepared.steps_per_epoch,
        "replicas": replicas,
        "data": prepared.source,
        "seconds": _timings(seconds, t_eval - t_evaluate, t_end - started),
        "config": _recorded_config(config, vocabulary_size=tokenizer.vocabulary_size,
                                   parameters=model.count_params()),
        USER_MODULES_KEY: user_modules(model),
        **(extra or {}),
    }
    _write_metrics(run_dir, metrics)
    return metrics


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


def evaluate_classifier_and_save(
    model,
    prepared: PreparedLabels,
    run_dir: str,
    config: dict,
    seconds: dict,
    started: float,
    replicas: int = 1,
    extra: dict | None = None,
) -> dict:
    """Scores a classifier on the test texts and writes its run folder; returns the metrics.

    Writes ``model.keras`` (the classifier alone: `keras_seq.training.model.inference_model`),
    the tokenizer files, ``test.tsv`` (the test texts, ``label<TAB>text``),
    ``confusion.png`` and ``metrics.json``: ``task`` (``"classify"``),
    ``labels`` (class id order), ``test_accuracy``, ``test_macro_f1``,
    ``test_correct``, ``test_examples``, ``confusion_matrix`` (rows: true
    label, columns: predicted, in ``labels`` order), ``per_class`` (label ->
    ``precision``, ``recall``, ``f1``, ``support``), ``class_counts``
    (``train``, ``validation``, ``test``: label -> texts), ``imbalance``
    (the largest training class over the smallest), ``class_weights`` (label
    -> weight, or None), ``truncated_texts`` (per split: texts longer than
    ``source_length`` tokens), ``unknown_tokens``, ``examples`` and
    ``errors`` (``{"text", "label", "predicted", "probability"}``),
    ``seconds``, ``config`` (with ``source_length``, ``vocabulary_size``
    and ``parameters``) and ``user_modules`` (`user_modules`), plus ``extra``.
    """
    require_tensorflow("keras_seq.training.evaluate_classifier_and_save")
    import numpy as np

    from keras_seq.training.model import inference_model

    t_evaluate = time.perf_counter()
    model = inference_model(model)
    test = prepared.test_examples
    test_data = prepared.dataset(test).map(lambda ids, *_: ids)
    probabilities = class_probabilities(model, test_data)
    predicted = probabilities.argmax(axis=-1)
    true_ids = prepared.class_ids(test)
    labels = prepared.labels
    scores = classification_scores(true_ids, predicted, len(labels))
    t_eval = time.perf_counter()

    model.save(os.path.join(run_dir, "model.keras"))
    prepared.tokenizer.save(run_dir)
    write_held_out(run_dir, test)
    _confusion_figure(scores["confusion_matrix"], labels, os.path.join(run_dir, "confusion.png"))
    t_end = time.perf_counter()

    rows = [
        {"text": text, "label": label, "predicted": labels[p],
         "probability": float(probabilities[i, p])}
        for i, ((label, text), p) in enumerate(zip(test, predicted))
    ]
    counts = {part: dict(zip(labels, prepared.class_counts(examples)))
              for part, examples in (("train", prepared.train_examples),
                                     ("validation", prepared.validation_examples),
                                     ("test", test))}
    train_counts = list(counts["train"].values())
    weights = prepared.class_weights
    metrics = {
        "task": "classify",
        "labels": labels,
        "test_accuracy": scores["accuracy"],
        "test_macro_f1": scores["macro_f1"],
        "test_correct": int(np.sum(predicted == np.asarray(true_ids))),
        "test_examples": len(test),
        "train_examples": len(prepared.train_examples),
        "validation_examples": len(prepared.validation_examples),
        "confusion_matrix": scores["confusion_matrix"],
        "per_class": {
            label: {key: scores[key][i] for key in ("precision", "recall", "f1", "support")}
            for i, label in enumerate(labels)
        },
        "class_counts": counts,
        "imbalance": max(train_counts) / min(train_counts),
        "class_weights": None if weights is None else dict(zip(labels, map(float, weights))),
        "truncated_texts": prepared.truncated,
        "unknown_tokens": prepared.unknown_tokens,
        "replicas": replicas,
        "seconds": _timings(seconds, t_eval - t_evaluate, t_end - started),
        "examples": rows[:5],
        "errors": [row for row in rows if row["predicted"] != row["label"]][:50],
        "config": _recorded_config(
            config, source_length=prepared.source_length,
            vocabulary_size=prepared.tokenizer.vocabulary_size, parameters=model.count_params(),
        ),
        USER_MODULES_KEY: user_modules(model),
        **(extra or {}),
    }
    _write_metrics(run_dir, metrics)
    return metrics


def _confusion_figure(confusion, labels, path):
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


def _attention_figure(model, tokenizer, sources, outputs, source_length, target_length, path):
    """Draws the attention weights (output tokens x source tokens) for a few examples."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import tensorflow as tf

    from keras_seq import decoding
    from keras_seq.models import seq2seq_kind

    encoder_inputs = tokenizer.encode(sources, source_length)
    output_ids = tokenizer.encode(outputs, target_length, add_end=True)
    decoder_inputs = tf.concat(
        [tf.fill([len(sources), 1], START_ID), output_ids[:, :-1]], axis=1
    )
    alpha = np.asarray(decoding.attention_weights(model, encoder_inputs, decoder_inputs))
    title = (
        "Bahdanau attention weights α (greedy decoding)"
        if seq2seq_kind(model) == "rnn"
        else "Cross-attention of the last decoder block, mean over heads (greedy decoding)"
    )

    fig, axes = plt.subplots(1, len(sources), figsize=(4.2 * len(sources), 4.5))
    for ax, source, output, a in zip(np.atleast_1d(axes), sources, outputs, alpha):
        source_tokens = [tokenizer.vocabulary[int(i)] for i in tokenizer.tokenize([source])[0]]
        output_tokens = [tokenizer.vocabulary[int(i)] for i in tokenizer.tokenize([output])[0]]
        output_tokens.append("[END]")
        ax.imshow(a[: len(output_tokens), : len(source_tokens)], cmap="viridis", vmin=0, vmax=1)
        ax.set_xticks(range(len(source_tokens)), source_tokens, fontsize=7)
        ax.set_yticks(range(len(output_tokens)), output_tokens, fontsize=7)
        ax.set_xlabel("source")
        ax.set_ylabel("output")
        ax.set_title(source, fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
