"""The kinds of `keras_seq.models.language_model` and the built-in cells, by name.

A module without dependencies, as `keras_seq.reserved_tokens` is: the
command line offers and checks ``--model`` and ``--cell`` before it loads
Keras. The builder, `keras_seq.run_config` and the tests read the kinds
here; the classes behind the names are in the one registry,
`keras_seq.layers.recurrent.registry`, which registers `BUILT_IN_CELLS`
(and the cells a block model names, its `RecurrentBlock` cells).
"""

__all__ = ["BLOCK_MODELS", "BUILT_IN_CELLS", "CLASSIFIER_POOLINGS", "GREEDY_ZERO_DEPRECATED",
           "LANGUAGE_MODEL_KINDS", "SAMPLING_SCHEDULES"]

BUILT_IN_CELLS = ("gru", "lstm", "peephole", "coupled", "simple", "layernorm_lstm",
                  "mingru", "minlstm")
"""The ``cell=`` names the registry starts with (`register_cell` adds more in
a Python process; the command line knows these)."""

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

CLASSIFIER_POOLINGS = ("last", "mean")
"""`keras_seq.models.classifier_from_language_model`'s ``pooling`` choices:
the hidden state at the last real token (GPT's) or their mean over the real tokens."""

SAMPLING_SCHEDULES = ("constant", "linear", "inverse_sigmoid")
"""`TrainingConfig.sampling_schedule` choices (Bengio et al. 2015's decays;
`keras_seq.tasks.scheduled_sampling`)."""

GREEDY_ZERO_DEPRECATED = (
    "beam width 0 for greedy decoding is deprecated: greedy is a beam width of 1, the "
    "default, as in keras-seq export and keras_seq.decoding.beam_search"
)
"""What `keras_seq.training.translate_texts` and ``keras-seq translate`` say to ``--beam 0``."""
