"""Metrics for sequence models: `Perplexity` of a language model (a Keras
metric), and the held-out scores the run recipes share: a language model's
loss over a whole text (`text_loss`, `bidirectional_text_loss`,
`scored_characters`) and a classifier's or a tagger's
(`classification_scores`, `confusion_figure`)."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq._backend import require_tensorflow
from keras_seq._validation import check_bool, check_int, check_positive_int, shape_error
from keras_seq.layers.attention._masking import keras_mask
from keras_seq.reserved_tokens import PAD_ID

__all__ = [
    "Perplexity",
    "bidirectional_text_loss",
    "classification_scores",
    "confusion_figure",
    "scored_characters",
    "text_loss",
]


@keras.saving.register_keras_serializable(package="keras_seq")
class Perplexity(keras.metrics.Metric):
    """Perplexity exp(mean cross-entropy) of next-token predictions, masked.

    Over everything seen since the last reset, with per-token weights w_i
    (the sample weights times the masks) and the predicted distribution p_i:

        perplexity = exp( Σ_i w_i · (−log p_i(y_i)) / Σ_i w_i )

    in nats (natural logarithm); the log of the result is the mean
    cross-entropy per token. The weights are the product of ``sample_weight``
    (broadcast to the targets' shape), the Keras mask carried by ``y_pred``
    (e.g. from ``Embedding(mask_zero=True)``) and, when ``mask_token_id`` is
    set, ``y_true != mask_token_id``. With no weight at all yet, the result is 1
    (zero loss), never NaN.

    Args:
        from_logits: bool, ``y_pred`` holds logits (True) or probabilities
            (False; normalised and clipped away from 0 as by
            `keras.losses.sparse_categorical_crossentropy`). Default True.
        mask_token_id: int or None, targets equal to this id get weight 0
            (e.g. 0, the padding id). Default None.
        name: str, metric name. Default ``"perplexity"``.
        dtype: the dtype of the metric's variables. Default float32.

    Call ``update_state(y_true, y_pred, sample_weight=None)`` with integer
    targets ``y_true`` of shape ``(B, T)`` (or any shape ``S``), predictions
    ``y_pred`` of shape ``S + (V,)`` and weights of shape ``S`` or a prefix of
    it (``(B,)`` weighs whole sequences).

    Examples:
        >>> import numpy as np
        >>> metric = Perplexity(mask_token_id=0)
        >>> y_true = np.array([[1, 2, 0]])
        >>> logits = np.zeros((1, 3, 4))  # uniform over 4 tokens
        >>> metric.update_state(y_true, logits)
        >>> round(float(metric.result()), 4)
        4.0

    References:
        Jelinek et al. Perplexity — a measure of the difficulty of speech
        recognition tasks. JASA 62, 1977.
    """

    def __init__(
        self,
        from_logits: bool = True,
        mask_token_id: int | None = None,
        name: str = "perplexity",
        dtype=None,
    ):
        super().__init__(name=name, dtype=dtype or "float32")
        self.from_logits = check_bool(self, "from_logits", from_logits)
        self.mask_token_id = (
            None if mask_token_id is None else check_int(self, "mask_token_id", mask_token_id)
        )
        self.total_loss = self.add_variable((), "zeros", dtype=self.dtype, name="total_loss")
        self.total_weight = self.add_variable((), "zeros", dtype=self.dtype, name="total_weight")

    def update_state(self, y_true, y_pred, sample_weight=None):
        mask = keras_mask(y_pred)
        y_true = ops.convert_to_tensor(y_true)
        y_pred = ops.convert_to_tensor(y_pred)
        if y_true.shape.rank is not None and y_pred.shape.rank is not None and (
            y_pred.shape.rank != y_true.shape.rank + 1
        ):
            raise shape_error(
                self, "y_pred", f"the shape of y_true {tuple(y_true.shape)} plus a vocabulary axis",
                y_pred.shape,
            )
        y_true = ops.cast(y_true, "int32")
        loss = keras.losses.sparse_categorical_crossentropy(
            y_true, ops.cast(y_pred, "float32"), from_logits=self.from_logits
        )  # (B, T)
        weight = ops.ones_like(loss)
        if sample_weight is not None:
            sample_weight = ops.cast(sample_weight, "float32")
            while len(sample_weight.shape) < len(loss.shape):
                sample_weight = ops.expand_dims(sample_weight, -1)
            weight = weight * sample_weight
        if mask is not None:
            weight = weight * ops.cast(mask, "float32")
        if self.mask_token_id is not None:
            weight = weight * ops.cast(ops.not_equal(y_true, self.mask_token_id), "float32")
        # A masked position may hold any value (even a non-finite one): it is
        # selected away, not multiplied by zero.
        loss = ops.where(weight > 0, loss, 0.0)
        self.total_loss.assign_add(ops.cast(ops.sum(loss * weight), self.dtype))
        self.total_weight.assign_add(ops.cast(ops.sum(weight), self.dtype))

    def result(self):
        mean = ops.divide_no_nan(self.total_loss, self.total_weight)
        return ops.exp(mean)

    def reset_state(self):
        self.total_loss.assign(0.0)
        self.total_weight.assign(0.0)

    def get_config(self):
        return {
            "name": self.name,
            "dtype": self.dtype,
            "from_logits": self.from_logits,
            "mask_token_id": self.mask_token_id,
        }


_EVALUATE_BATCH = 256


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

    @tf.function(input_signature=[tf.TensorSpec([None, context], tf.int32)] * 2, autograph=False)
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

    @tf.function(input_signature=[tf.TensorSpec([None, context], tf.int32)] * 3, autograph=False)
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
