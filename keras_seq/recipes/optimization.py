"""A run's optimizer and compilation: what every recipe trains with."""

from __future__ import annotations

from keras_seq.reserved_tokens import PAD_ID

__all__ = ["build_optimizer", "compile_run", "padded_cross_entropy"]


def padded_cross_entropy():
    """The cross-entropy of logits against token ids, padding (id 0) not counted."""
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD_ID)


def compile_run(model, config, steps: int, loss, metrics=None, loss_weights=None,
                beta_2: float = 0.999) -> None:
    """Compiles ``model`` as a run trains it: Adam (``beta_2``, clipping at norm
    1) with a linear warm-up over the first 5% of the ``steps`` and cosine
    decay to 5% of ``config.learning_rate`` (the Transformer's post-norm
    blocks need the warm-up), on ``loss``; then creates the optimizer's
    variables (`build_optimizer`)."""
    import keras

    warmup = steps // 20
    learning_rate = keras.optimizers.schedules.CosineDecay(
        0.0,
        decay_steps=max(1, steps - warmup),
        alpha=0.05,
        warmup_target=config.learning_rate,
        warmup_steps=warmup,
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate, beta_2=beta_2, clipnorm=1.0),
        loss=loss,
        metrics=metrics,
        loss_weights=loss_weights,
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
