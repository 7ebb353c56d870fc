"""The model of a run and its optimizer."""

from __future__ import annotations

from keras_seq.reserved_tokens import PAD_ID
from keras_seq.run_config import BLOCK_MODELS, TEXT_TASKS, TrainingConfig

__all__ = ["build_model", "build_optimizer", "compile_model", "inference_model"]


def build_model(config: TrainingConfig, vocabulary_size: int, num_classes: int | None = None):
    """The model a run trains: for ``task="classify"`` with ``lm_weight`` > 0
    the one with both outputs (`models.classifier_from_language_model` with
    ``lm_logits=True``); `inference_model` is the one a run folder keeps."""
    from keras_seq import models

    if config.task == "classify":
        return _classifier(config, vocabulary_size, num_classes)
    if config.task == "bilm":
        from keras_seq.models.elmo import bidirectional_language_model

        return bidirectional_language_model(
            vocabulary_size, num_layers=config.layers, units=config.units, cell=config.cell,
        )
    if config.task == "lm":
        return _language_model(config, vocabulary_size, dropout=0.0)
    if config.model == "rnn":
        return models.rnn_seq2seq(
            vocabulary_size,
            vocabulary_size,
            units=config.units,
            cell=config.cell,
            attention=None if config.attention == "none" else config.attention,
            zoneout=config.zoneout,
        )
    return models.transformer_seq2seq(
        vocabulary_size,
        vocabulary_size,
        num_layers=config.layers,
        model_dim=config.units,
        num_heads=4,
        intermediate_dim=4 * config.units,
        dropout=0.1,
    )


def _language_model(config: TrainingConfig, vocabulary_size: int, dropout: float):
    from keras_seq import models

    return models.language_model(
        vocabulary_size,
        kind=config.model,
        num_layers=config.layers,
        units=config.units,
        num_heads=4,
        # Griffin's MLP is 3 wide for the residual recurrent blocks.
        intermediate_dim=(3 if config.model in BLOCK_MODELS else 4) * config.units,
        cell=config.cell,
        dropout=dropout,
    )


# Dropout of a classifier (Radford et al. fine-tune with 0.1 on the
# classifier and the body alike).
_CLASSIFIER_DROPOUT = 0.1


def _classifier(config: TrainingConfig, vocabulary_size: int, num_classes: int):
    import os

    from keras_seq import models

    if config.init_from is None and config.model not in BLOCK_MODELS:
        return models.sequence_classifier(
            vocabulary_size, num_classes, kind=config.model, units=config.units,
            cell=config.cell, num_layers=config.layers, num_heads=4,
            intermediate_dim=4 * config.units, dropout=_CLASSIFIER_DROPOUT,
        )
    # A language model's body, built in this run's dtype policy (and strategy
    # scope) with dropout for fine-tuning: with init_from its trained
    # weights, otherwise (a block model from scratch) random ones.
    body = _language_model(config, vocabulary_size, dropout=_CLASSIFIER_DROPOUT)
    if config.init_from is not None:
        body.load_weights(os.path.join(config.init_from, "model.keras"))
    if config.freeze_body:
        body.trainable = False
    return models.classifier_from_language_model(
        body, num_classes, dropout=_CLASSIFIER_DROPOUT, lm_logits=bool(config.lm_weight),
        name="classifier", pooling=config.pooling,
    )


def inference_model(model):
    """The classifier a run keeps: ``model`` itself, or of a model trained
    with the auxiliary objective, its ``"classes"`` output alone."""
    import keras

    if isinstance(model.output, dict):
        return keras.Model(model.inputs[0], model.output["classes"], name=model.name)
    return model


def compile_model(model, config: TrainingConfig, steps: int) -> None:
    import keras

    # Linear warm-up over the first 5% of the steps (the Transformer's
    # post-norm blocks need it), then cosine decay to 5% of the peak.
    warmup = steps // 20
    learning_rate = keras.optimizers.schedules.CosineDecay(
        0.0,
        decay_steps=max(1, steps - warmup),
        alpha=0.05,
        warmup_target=config.learning_rate,
        warmup_steps=warmup,
    )
    metrics = None
    loss_weights = None
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD_ID)
    if config.task == "classify":
        loss, metrics, loss_weights = _classifier_loss(config)
    if config.task == "lm":
        from keras_seq.metrics import Perplexity

        metrics = [Perplexity(mask_token_id=PAD_ID)]
    if config.task == "bilm":  # one loss per direction; Keras adds them
        loss = {"forward": loss, "backward": loss}
    # β2 = 0.99 for the language models, as nanoGPT: few tokens per step.
    beta_2 = 0.99 if config.task in TEXT_TASKS else 0.999
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate, beta_2=beta_2, clipnorm=1.0),
        loss=loss,
        metrics=metrics,
        loss_weights=loss_weights,
    )
    build_optimizer(model)


def _classifier_loss(config: TrainingConfig):
    """``(loss, metrics, loss_weights)`` of a classifier: the cross-entropy of
    the class, plus λ times the next-token cross-entropy with ``lm_weight`` λ."""
    import keras

    task = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
    if not config.lm_weight:
        return task, [accuracy], None
    next_tokens = keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                             ignore_class=PAD_ID)
    return ({"classes": task, "next_tokens": next_tokens}, {"classes": [accuracy]},
            {"classes": 1.0, "next_tokens": config.lm_weight})


def build_optimizer(model) -> None:
    """Creates the optimizer's variables of a compiled ``model`` now, under the
    current strategy scope (for every pipeline that compiles a model: this
    module's and the hypermodels of `keras_seq.tuning`).

    Without a distribution strategy Keras creates them inside the first trace
    of the train step, and a `tf.function` that creates variables while
    tracing is traced a second time, a cost paid by every run
    (measured in benchmarks/RESULTS.md).
    """
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
