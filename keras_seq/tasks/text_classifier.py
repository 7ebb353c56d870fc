"""`TextClassifier`: a text's class, from a backbone's reading of it."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq.model_kinds import CLASSIFIER_POOLINGS
from keras_seq.tasks.preprocessor import Preprocessor
from keras_seq.tasks.task import Task

__all__ = ["TextClassifier", "TextClassifierPreprocessor", "token_mean"]

# Texts classified at once by `TextClassifier.predict` and `classify`.
_BATCH = 1000


@keras.saving.register_keras_serializable(package="keras_seq")
class TextClassifierPreprocessor(Preprocessor):
    """A classifier's strings: its tokenizer, the most tokens read of a text, and its labels.

    Args:
        tokenizer: the tokenizer.
        sequence_length: int, the most tokens read of a text (a longer one is cut).
        labels: the class names, in class id order.
    """

    def __init__(self, tokenizer=None, sequence_length: int | None = None, labels=None,
                 **kwargs):
        super().__init__(tokenizer, sequence_length, **kwargs)
        self.labels = None if labels is None else [str(label) for label in labels]

    def get_config(self) -> dict:
        return {**super().get_config(), "labels": self.labels}

    def token_ids(self, texts):
        """Each text's first ``sequence_length`` token ids, padded to the longest
        (`keras_seq.data.classification_ids`)."""
        from keras_seq.data import classification_ids

        return classification_ids(self.tokenizer, texts, self.sequence_length)


def token_mean(x, token_ids):
    """The mean of ``x`` ``(B, T, d)`` over each row's real tokens (nonzero
    ids of ``token_ids`` ``(B, T)``): ``(B, d)``, zeros for a row of padding
    only (Keras' masked GlobalAveragePooling1D would divide 0 by 0 there)."""
    # expand_dims, not [:, :, None]: a new axis by slicing converts to
    # TensorFlow Lite only through its Flex ops.
    real = ops.expand_dims(ops.cast(ops.not_equal(token_ids, 0), x.dtype), -1)
    return ops.sum(x * real, axis=1) / ops.maximum(ops.sum(real, axis=1), 1.0)


def last_token(x, token_ids):
    """``x`` ``(B, T, d)`` at each row's last real token (its last nonzero id;
    padding is at the end): ``(B, d)``; a row of padding only reads position 0."""
    lengths = ops.sum(ops.cast(ops.not_equal(token_ids, 0), "int32"), axis=1)  # (B,)
    last = ops.maximum(lengths - 1, 0)
    return ops.take_along_axis(x, last[:, None, None], axis=1)[:, 0]  # (B, d)


_POOLING = {"mean": token_mean, "last": last_token}


@keras.saving.register_keras_serializable(package="keras_seq")
class TextClassifier(Task):
    """A text classifier: token ids ``(B, T)`` -> the logits ``(B, num_classes)``.

    A backbone reads the text, its reading is pooled into one vector (none
    to pool when the backbone gives one already), then dropout and a linear
    layer give the class logits (KerasHub's ``TextClassifier``).
    `models.sequence_classifier` (a bidirectional recurrent or Transformer
    encoder, the mean over the real tokens), `models.dcnn_classifier` and
    `models.classifier_from_language_model` (a language model's body: GPT's
    fine-tuning model) build these.

    With ``language_model`` (a `CausalLM` whose `CausalLM.backbone` is the
    backbone), the model also returns that language model's next-token
    logits on the same text, from the same hidden states: ``{"classes": (B,
    num_classes), "next_tokens": (B, T, V)}``, for the auxiliary objective
    L = L_task + λ·L_LM of Radford et al. (2018). `without_language_model`
    is the classifier alone, sharing the layers.

    Args:
        backbone: a `keras.Model` ``token_ids (B, T)`` -> ``(B, T, d)``
            hidden states, or ``(B, d)`` features when ``pooling`` is None.
        num_classes: int.
        pooling: ``"mean"`` (over the real tokens), ``"last"`` (the hidden
            state at the last real token) or None.
        dropout: float, before the linear layer.
        output_layer: the linear layer (default: a new ``Dense(num_classes)``
            named ``"class_logits"``).
        language_model: a `CausalLM` whose body is the backbone, or None.
        preprocessor: a `TextClassifierPreprocessor`, for strings.
    """

    _VALUES = ("num_classes", "pooling", "dropout")

    def __init__(self, backbone=None, num_classes: int = 2, pooling: str | None = "mean",
                 dropout: float = 0.1, output_layer=None, language_model=None,
                 preprocessor=None, **kwargs):
        from keras_seq._validation import check_choice, check_positive_int, check_rate

        where = "TextClassifier"
        num_classes = check_positive_int(where, "num_classes", num_classes)
        check_choice(where, "pooling", pooling, (*CLASSIFIER_POOLINGS, None))
        dropout = check_rate(where, "dropout", dropout)
        if language_model is not None:
            backbone = language_model.backbone
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        hidden = backbone(token_ids)
        pooled = hidden if pooling is None else _POOLING[pooling](hidden, token_ids)
        pooled = keras.layers.Dropout(dropout, name="class_dropout")(pooled)
        if output_layer is None:
            output_layer = keras.layers.Dense(num_classes, dtype="float32", name="class_logits")
        logits = output_layer(pooled)
        outputs = logits
        if language_model is not None:
            outputs = {"classes": logits, "next_tokens": language_model.head(hidden)}
        kwargs.setdefault("name", "text_classifier")
        super().__init__(inputs=token_ids, outputs=outputs, preprocessor=preprocessor, **kwargs)
        self.backbone = backbone
        self.num_classes = num_classes
        self.pooling = pooling
        self.dropout = dropout
        self.output_layer = output_layer
        self.language_model = language_model

    def get_config(self) -> dict:
        config = super().get_config()
        # The backbone of a classifier with its language model is that
        # model's body: saved once, as the language model.
        if self.language_model is not None:
            config["language_model"] = keras.saving.serialize_keras_object(self.language_model)
        else:
            config["backbone"] = keras.saving.serialize_keras_object(self.backbone)
        config["output_layer"] = keras.saving.serialize_keras_object(self.output_layer)
        return config

    @classmethod
    def from_config(cls, config: dict):
        config = dict(config)
        for name in ("backbone", "language_model", "output_layer"):
            if config.get(name) is not None:
                config[name] = keras.saving.deserialize_keras_object(config[name])
        return super().from_config(config)

    def without_language_model(self) -> TextClassifier:
        """This classifier without the language model's logits (the same layers):
        the model a fine-tuning run keeps."""
        if self.language_model is None:
            return self
        return TextClassifier(self.backbone, self.num_classes, self.pooling, self.dropout,
                              output_layer=self.output_layer, preprocessor=self.preprocessor,
                              name=self.name)

    # --- strings ---

    def predict(self, x, *args, batch_size=None, **kwargs):
        """The class probabilities ``(N, num_classes)`` of a list of texts (or one
        text), read ``batch_size`` at a time (default 1000); any other ``x``
        is Keras' ``predict`` (the logits)."""
        if not _are_texts(x):
            return super().predict(x, *args, batch_size=batch_size, **kwargs)
        return self._probabilities([x] if isinstance(x, str) else list(x), batch_size or _BATCH)

    def classify(self, texts, batch_size: int = _BATCH) -> list[tuple[str, float]]:
        """``(label, probability)`` of each text: its most probable class and
        that class's probability (texts read ``batch_size`` at a time)."""
        preprocessor = self._require_preprocessor("classify")
        probabilities = self._probabilities([texts] if isinstance(texts, str) else list(texts),
                                            batch_size)
        labels = preprocessor.labels
        return [(labels[i], float(p[i])) for p, i in zip(probabilities,
                                                           probabilities.argmax(-1))]

    def _probabilities(self, texts, batch_size):
        import numpy as np

        preprocessor = self._require_preprocessor("predict")
        if not texts:
            return np.zeros((0, self.num_classes), np.float32)
        batches = (preprocessor.token_ids(texts[i : i + batch_size])
                   for i in range(0, len(texts), batch_size))
        return class_probabilities(self, batches)


def class_probabilities(model, ids_batches):
    """Class probabilities ``(N, classes)`` float32 (NumPy) of a classifier over
    batches of token ids ``(B, T)``: the softmax of its logits."""
    import numpy as np
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False)
    def probabilities(ids):
        return tf.nn.softmax(tf.cast(model(ids, training=False), tf.float32))

    return np.concatenate([probabilities(ids).numpy() for ids in ids_batches])


def _are_texts(x) -> bool:
    return isinstance(x, str) or (isinstance(x, (list, tuple)) and bool(x)
                                  and all(isinstance(t, str) for t in x))
