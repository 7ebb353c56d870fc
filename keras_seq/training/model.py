"""The model of a run and its optimizer."""

from __future__ import annotations

from keras_seq.reserved_tokens import PAD_ID
from keras_seq.run_config import BLOCK_MODELS, TEXT_TASKS, TrainingConfig

__all__ = ["build_model", "build_optimizer", "compile_model"]


def build_model(config: TrainingConfig, vocabulary_size: int):
    from keras_seq import models

    if config.task == "bilm":
        from keras_seq.models.elmo import bidirectional_language_model

        return bidirectional_language_model(
            vocabulary_size, num_layers=config.layers, units=config.units, cell=config.cell,
        )
    if config.task == "lm":
        # Griffin's MLP is 3 wide for the residual recurrent blocks.
        expansion = 3 if config.model in BLOCK_MODELS else 4
        return models.language_model(
            vocabulary_size,
            kind=config.model,
            num_layers=config.layers,
            units=config.units,
            num_heads=4,
            intermediate_dim=expansion * config.units,
            cell=config.cell,
            dropout=0.0,
        )
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
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD_ID)
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
    )
    build_optimizer(model)


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
