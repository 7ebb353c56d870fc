"""The kinds of `keras_seq.models.language_model`, by name.

A module without dependencies, as `keras_seq.reserved_tokens` is: the
command line offers and checks ``--model`` before it loads Keras. The
builder, `keras_seq.run_config` and the tests read the kinds here; the
cells a block model names are the `RecurrentBlock` cells of the one
registry, `keras_seq.layers.recurrent.registry`.
"""

__all__ = ["BLOCK_MODELS", "LANGUAGE_MODEL_KINDS"]

BLOCK_MODELS: dict[str, tuple[str, ...]] = {
    "mingru": ("mingru",),
    "minlstm": ("minlstm",),
    "rglru": ("rglru",),  # Griffin's recurrent block
    "xlstm": ("mlstm", "slstm"),  # Beck et al.: mLSTM and sLSTM blocks alternate
}
"""The language-model kinds of residual `RecurrentBlock`s (the parallel
recurrences and xLSTM), and the block cells of their layers in turn: layer i
holds ``cells[i % len(cells)]``."""

LANGUAGE_MODEL_KINDS = ("transformer", "rnn", *BLOCK_MODELS)
"""`keras_seq.models.language_model`'s ``kind`` choices."""
