"""GPT's fine-tuning model: a language model's body with a linear head."""

from __future__ import annotations

import keras

from keras_seq._validation import (
    check_bool,
    check_choice,
    check_positive_int,
    check_rate,
    invalid_type,
)
from keras_seq.model_kinds import CLASSIFIER_POOLINGS as POOLINGS
from keras_seq.tasks import CausalLM, TextClassifier, as_task


def classifier_from_language_model(
    lm_model: keras.Model,
    num_classes: int,
    dropout: float = 0.1,
    lm_logits: bool = False,
    name: str = "language_model_classifier",
    pooling: str = "last",
) -> keras.Model:
    """A classifier whose body is a language model's: GPT's fine-tuning model.

    The text goes through the embedding and blocks of ``lm_model`` (its own
    layers, shared: training the classifier trains them); the hidden state h
    of the last block at each row's last real token (its last nonzero id;
    padding is at the end) is the text's representation, and a linear layer
    gives the class logits: logits = dropout(h) W + b (Radford et al. 2018,
    §3.2). A causal body's last token is the only one that has read the whole
    text.

    With ``pooling="mean"`` the representation is instead the mean of h
    over the row's real tokens (ULMFiT's and Dai & Le's readers use the
    whole sequence): a causal body's state at the last token of a long text
    holds mostly the last few characters, and a sentiment may be anywhere.

    With ``lm_logits=True`` the model also returns the language model's own
    next-token logits on the same text, for the auxiliary objective
    L = L_task + λ·L_LM (eq. 5 of the paper): compile it with one loss per
    output and ``loss_weights={"classes": 1.0, "next_tokens": λ}``
    (`keras_seq.data.make_classification_dataset` with
    ``next_token_targets=True`` gives the targets). Both models share the
    layers: train the one with both outputs, serve the one without.

    A linear probe trains the head alone: set ``lm_model.trainable = False``
    before compiling, as in Keras' transfer-learning guide. To keep
    ``lm_model``'s weights as they are, pass a copy
    (``keras.models.clone_model`` and ``set_weights``).

    Args:
        lm_model: a model built by `language_model` (any ``kind``: the
            Transformer, the recurrent stack or the residual recurrent
            blocks), trained or loaded from a ``.keras`` file.
        num_classes: int, number of classes.
        dropout: float, dropout rate before the linear layer. Default 0.1.
        lm_logits: bool, also return the next-token logits. Default False.
        name: model name.
        pooling: ``"last"`` (default, GPT's: h at the last real token) or
            ``"mean"`` (the mean of h over the real tokens).

    Returns:
        A `keras_seq.tasks.TextClassifier` ``token_ids (B, T) -> logits (B,
        num_classes)`` over ``lm_model``'s `CausalLM.backbone`, or with
        ``lm_logits`` ``-> {"classes": (B, num_classes), "next_tokens": (B, T,
        vocabulary_size)}`` (`TextClassifier.without_language_model` is then
        the classifier alone). The new layers are ``"class_dropout"`` and
        ``"class_logits"``.

    Examples:
        >>> from keras_seq import models
        >>> lm = models.language_model(30, num_layers=1, units=8, num_heads=2, intermediate_dim=16)
        >>> classifier = classifier_from_language_model(lm, 3)
        >>> tuple(classifier(keras.ops.ones((2, 5), "int32")).shape)
        (2, 3)

    References:
        Radford et al. Improving Language Understanding by Generative
        Pre-Training. 2018.
    """
    where = "classifier_from_language_model"
    num_classes = check_positive_int(where, "num_classes", num_classes)
    dropout = check_rate(where, "dropout", dropout)
    lm_logits = check_bool(where, "lm_logits", lm_logits)
    check_choice(where, "pooling", pooling, POOLINGS)
    try:
        language_model = as_task(lm_model)
    except TypeError:
        language_model = None
    if not isinstance(language_model, CausalLM):
        raise invalid_type(where, "lm_model",
                           "a keras.Model built by keras_seq.models.language_model", lm_model)
    if lm_logits:
        return TextClassifier(language_model=language_model, num_classes=num_classes,
                              pooling=pooling, dropout=dropout, name=name)
    return TextClassifier(language_model.backbone, num_classes, pooling=pooling,
                          dropout=dropout, name=name)
