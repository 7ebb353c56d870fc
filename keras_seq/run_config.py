"""The options of ``keras-seq train`` and ``tune``: `TrainingConfig`, its choices and defaults.

Imports neither Keras nor TensorFlow, so that the command line parses its
arguments, checks them and prints ``--help`` before loading either.
`keras_seq.training` re-exports every public name here.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

from keras_seq import model_kinds
from keras_seq._validation import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_positive_int,
    invalid_value,
)
from keras_seq.reserved_tokens import RESERVED_TOKENS

__all__ = [
    "ATTENTIONS",
    "AUXILIARY_LM_WEIGHT",
    "CLASSIFY_DEFAULTS",
    "CLASSIFY_MAX_LENGTH",
    "CLASS_WEIGHTS",
    "FINE_TUNE_DEFAULTS",
    "LINEAR_PROBE_LEARNING_RATE",
    "GREEDY_ZERO_DEPRECATED",
    "BACKUP_DIR",
    "BLOCK_MODELS",
    "CELLS",
    "DISTRIBUTIONS",
    "LM_DEFAULTS",
    "LSTM_FAMILY_DEFAULTS",
    "MODELS",
    "MODEL_DEFAULTS",
    "NOT_IN_BACKUP",
    "PRECISIONS",
    "SAMPLING_SCHEDULES",
    "SEARCH_EMBEDDING_DIMS",
    "SEARCH_UNITS",
    "TASKS",
    "TEXT_TASKS",
    "TOKENIZERS",
    "TUNE_ATTENTIONS",
    "BILM_DEFAULTS",
    "WORDPIECE_VOCAB_SIZE",
    "TUNERS",
    "TrainingConfig",
    "default_for",
]

TUNERS = ("random", "hyperband", "bayesian")
"""The ``tuner`` names of `keras_seq.tuning.search` (``keras-seq tune --tuner``)."""
GREEDY_ZERO_DEPRECATED = (
    "beam width 0 for greedy decoding is deprecated: greedy is a beam width of 1, the "
    "default, as in keras-seq export and keras_seq.decoding.beam_search"
)
"""What `keras_seq.training.translate_texts` and ``keras-seq translate`` say to ``--beam 0``."""
SEARCH_UNITS = (64, 128, 256)
"""The recurrent widths `keras_seq.tuning.Seq2SeqHyperModel` searches by default."""
SEARCH_EMBEDDING_DIMS = (32, 64)
"""The embedding widths `keras_seq.tuning.Seq2SeqHyperModel` searches by default."""

# Per model family: values measured to reach the accuracy targets on the date
# task within the time budget on a 2-core CPU (see README). Width 96 for the
# Transformer (4 heads, feed-forward 384): 99.95% like width 128 on the dates,
# in three quarters of the time. The LSTM family learns the date task more
# slowly per epoch than the GRU, hence its epochs; the Elman RNN ("simple")
# takes the GRU's (see benchmarks/RESULTS.md for its accuracy).
MODEL_DEFAULTS = {
    "rnn": {"epochs": 2, "batch_size": 128, "learning_rate": 3e-3, "units": 64},
    "transformer": {"epochs": 4, "batch_size": 128, "learning_rate": 2e-3, "units": 96},
}
"""Per model family (``rnn``, ``transformer``): the defaults of the translation tasks."""
LSTM_FAMILY_DEFAULTS = {"epochs": 4}
"""Over ``MODEL_DEFAULTS["rnn"]``: the translation defaults of a cell of the LSTM
family, one that carries h and c (two states in its ``state_size``,
`keras_seq.layers.recurrent.registry.is_lstm_family`)."""
# Character language models (task="lm"): nanoGPT's CPU recipe for tiny
# Shakespeare (4 blocks of width 128 and 4 heads, context 64, batch 12,
# dropout 0, warm-up and cosine decay, Adam beta_2 0.99), with 1250 steps
# instead of 2000 and so a 2e-3 peak instead of 1e-3: its validation loss in
# less time on a 2-core CPU (see benchmarks/RESULTS.md). An epoch is
# `steps_per_epoch` batches of random windows.
# The residual recurrent blocks (models.language_model(kind="mingru", ...)):
# the Transformer's recipe, which they reach 1.88 with in less time on the
# 2-core CPU; the xLSTM's sLSTM blocks train step by step, so it takes 750
# steps instead of 1250 to stay within 5 minutes (see benchmarks/RESULTS.md,
# "Parallel recurrences"). The minGRU takes batches of 32 at a peak of 4e-3:
# 1.573 nats/char in 157 s against 1.690 in 82 s with 12 at 2e-3 (issue 44's
# goal: 1.60 within 5 minutes; benchmarks/RESULTS.md, "A better LM").
_BLOCK_LM_DEFAULTS = {"epochs": 5, "steps_per_epoch": 250, "batch_size": 12,
                      "learning_rate": 2e-3, "units": 128, "layers": 4, "context": 64,
                      "validation_size": 256}
LM_DEFAULTS = {
    "transformer": {"epochs": 5, "steps_per_epoch": 250, "batch_size": 12,
                    "learning_rate": 2e-3, "units": 128, "layers": 4, "context": 64,
                    "validation_size": 256},
    "rnn": {"epochs": 6, "steps_per_epoch": 250, "batch_size": 12,
            "learning_rate": 3e-3, "units": 256, "layers": 2, "context": 64,
            "validation_size": 256},
    **{kind: dict(_BLOCK_LM_DEFAULTS) for kind in model_kinds.BLOCK_MODELS},
    "mingru": {**_BLOCK_LM_DEFAULTS, "batch_size": 32, "learning_rate": 4e-3},
    "xlstm": {**_BLOCK_LM_DEFAULTS, "epochs": 3},
}
"""Per ``kind`` of language model: the defaults of ``task="lm"``."""
# ELMo's biLM (task="bilm", models.bidirectional_language_model): two stacks
# of 2 CIFG layers of 128 units each way; 1000 steps of 32 windows of 64
# characters.
BILM_DEFAULTS = {"epochs": 4, "steps_per_epoch": 250, "batch_size": 32,
                 "learning_rate": 3e-3, "units": 128, "layers": 2, "context": 64,
                 "validation_size": 256}
"""The defaults of ``task="bilm"``."""
TOKENIZERS = ("char", "wordpiece")
"""`TrainingConfig.tokenizer` choices: `keras_seq.text.CharTokenizer` or
`keras_seq.text.WordPieceTokenizer` (``task="bilm"`` only)."""
# About 1.8 characters per token on tiny Shakespeare (1 MB): a 64-token window
# sees about 115 characters, and the embedding and softmax stay small next to
# the recurrent stacks, as befits a text this short.
WORDPIECE_VOCAB_SIZE = 1000
"""The default `TrainingConfig.vocab_size` of ``tokenizer="wordpiece"``."""
# Text classification (task="classify", models.sequence_classifier): a
# bidirectional GRU of 64 units or 2 Transformer encoder blocks of width 96
# (as the translation models), 10 passes over the training texts, which are
# usually far fewer than a translation task's pairs.
CLASSIFY_DEFAULTS = {
    "rnn": {"epochs": 10, "batch_size": 32, "learning_rate": 2e-3, "units": 64, "layers": 1},
    "transformer": {"epochs": 10, "batch_size": 32, "learning_rate": 1e-3, "units": 96,
                    "layers": 2},
    # A block model's classifier is its language model's body with a linear
    # head (as a fine-tuned one), from random weights: the language model's
    # width and depth.
    **{kind: {"epochs": 10, "batch_size": 32, "learning_rate": 2e-3, "units": 128, "layers": 4}
       for kind in model_kinds.BLOCK_MODELS},
}
"""Per model family: the defaults of ``task="classify"`` trained from scratch."""
# Fine-tuning a language model (task="classify", init_from=...): a smaller
# peak learning rate than from scratch, so that the pre-trained body is
# adjusted rather than overwritten (Radford et al. fine-tune at a fortieth of
# their pre-training rate; a fourth here, over far fewer steps). The width and
# depth are the language model's.
FINE_TUNE_DEFAULTS = {"epochs": 10, "batch_size": 32, "learning_rate": 5e-4}
"""The defaults of ``task="classify"`` with ``init_from`` (a language model's run)."""
# A linear probe trains a new head alone, from random weights: the larger
# rate of a model trained from scratch, not a fine-tuning one.
LINEAR_PROBE_LEARNING_RATE = 5e-3
"""The default learning rate of ``task="classify"`` with ``freeze_body``."""
AUXILIARY_LM_WEIGHT = 0.5
"""λ of the auxiliary objective L = L_task + λ·L_LM when fine-tuning (Radford et al.'s 0.5)."""
CLASS_WEIGHTS = ("none", "balanced")
"""`TrainingConfig.class_weight` choices: every text weighs 1, or each class
``n / (classes · n_class)`` (scikit-learn's and Keras' guides' "balanced")."""
CLASSIFY_MAX_LENGTH = 256
"""The default `TrainingConfig.max_source_length` of ``task="classify"``: tokens read of a text."""
_TRANSLATE_MAX_LENGTH = 64
_SEQ2SEQ_DEFAULTS = {"layers": 2, "validation_size": 2_000}
_FAMILY_KEYS = ("epochs", "batch_size", "learning_rate", "units", "layers", "validation_size")
_LM_KEYS = ("steps_per_epoch", "context")

TASKS = ("dates", "translate", "lm", "bilm", "classify")
"""`TrainingConfig.task` choices."""
TEXT_TASKS = ("lm", "bilm")
"""The tasks that train on a text (``data=`` a text file, by default tiny
Shakespeare) in random windows of ``context`` characters."""
BLOCK_MODELS = tuple(model_kinds.BLOCK_MODELS)
"""The `TrainingConfig.model` choices of ``task="lm"`` only: language models of
residual recurrent blocks (`keras_seq.models.language_model`'s ``kind``; the
names of `keras_seq.model_kinds.BLOCK_MODELS`)."""
MODELS = ("rnn", "transformer", *BLOCK_MODELS)
"""`TrainingConfig.model` choices."""
POOLINGS = model_kinds.CLASSIFIER_POOLINGS
"""`TrainingConfig.pooling` choices."""


class _RegisteredCells(Sequence):
    """The names of `keras_seq.layers.recurrent.registry`, read when first
    used (it imports the layers, and so Keras): parsing arguments does not
    load Keras unless a cell is named."""

    def _names(self) -> tuple[str, ...]:
        from keras_seq.layers.recurrent.registry import cell_names

        return cell_names()

    def __getitem__(self, index):
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __contains__(self, name) -> bool:
        return name in self._names()

    def __repr__(self) -> str:
        return repr(self._names())


CELLS = _RegisteredCells()
"""`TrainingConfig.cell` choices: the registered cell names (`keras_seq.models.register_cell`),
a view of the registry (`keras_seq.layers.recurrent.registry.cell_names`)."""
ATTENTIONS = ("bahdanau", "luong", "monotonic_bahdanau", "monotonic_luong", "none")
"""`TrainingConfig.attention` choices."""

TUNE_ATTENTIONS = ("bahdanau", "luong", "none")
"""The attentions `keras_seq.tuning` searches (the monotonic ones, for
streaming, are chosen, not searched)."""

SAMPLING_SCHEDULES = ("constant", "linear", "inverse_sigmoid")
"""`TrainingConfig.sampling_schedule` choices (Bengio et al. 2015's decays;
`keras_seq.training.scheduled_sampling`)."""
DISTRIBUTIONS = ("auto", "none", "mirrored", "multi_worker")
"""`TrainingConfig.distribute` choices (`keras_seq.distribute.STRATEGIES` and ``"auto"``)."""
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
"""`TrainingConfig.precision` choices (Keras dtype policies)."""
BACKUP_DIR = "backup"
"""The folder of a run folder that holds its backup while it trains."""
# Options that may change between a run and its resumption.
NOT_IN_BACKUP = ("out", "name", "distribute", "verbose", "fresh", "backup_every_steps")
"""The `TrainingConfig` fields that may differ between a run and its resumption."""


def default_for(key: str, model: str = "rnn", cell: str | None = None,
                task: str = "dates") -> Any:
    """The default of a per-family option of `TrainingConfig`.

    ``epochs``, ``batch_size``, ``learning_rate``, ``units``, ``layers`` and
    (all but ``task="classify"``) ``validation_size``; ``steps_per_epoch``
    and ``context`` for ``task="lm"`` (`LM_DEFAULTS`), where ``cell`` plays no
    part. ``task="classify"``: `CLASSIFY_DEFAULTS`, a classifier trained from
    scratch (a fine-tuned one takes `FINE_TUNE_DEFAULTS` and its language
    model's sizes). For ``model="rnn"`` translation, ``cell`` is a registered
    cell name, whose family the registry tells (a cell of the LSTM family
    takes `LSTM_FAMILY_DEFAULTS`; reading the registry imports Keras), or
    None: the default cell, the GRU.

    Examples:
        >>> default_for("epochs"), default_for("epochs", cell="lstm"), default_for("units", "transformer")
        (2, 4, 96)
        >>> default_for("layers", "transformer", task="lm"), default_for("context", "transformer", task="lm")
        (4, 64)
        >>> default_for("epochs", task="classify")
        10
    """
    if task == "lm":
        return LM_DEFAULTS[model][key]
    if task == "bilm":
        return BILM_DEFAULTS[key]
    if key in _LM_KEYS:
        raise invalid_value("default_for", "key", f"a key of task 'lm' only ({task=!r})", key)
    if task == "classify":
        if key == "validation_size":
            raise invalid_value("default_for", "key", "not 'validation_size' for task "
                                "'classify' (its split is 80/10/10 by label)", key)
        return CLASSIFY_DEFAULTS[model][key]
    defaults = {**MODEL_DEFAULTS[model], **_SEQ2SEQ_DEFAULTS}
    if model == "rnn" and cell is not None:
        from keras_seq.layers.recurrent import registry

        if registry.is_lstm_family(registry.check_cell(cell, "default_for")):
            defaults.update(LSTM_FAMILY_DEFAULTS)
    return defaults[key]


@dataclasses.dataclass
class TrainingConfig:
    """What `train` does; the fields are ``keras-seq train``'s options.

    Attributes:
        task: ``"dates"`` (the embedded date task), ``"translate"`` (a TSV
            file, ``data``), ``"bilm"`` (ELMo's bidirectional language
            model, `models.bidirectional_language_model`, of a text file, by
            default tiny Shakespeare, in ``tokenizer`` tokens) or ``"lm"`` (a character language model of a
            text file, ``data``, by default tiny Shakespeare). None:
            ``"translate"`` when ``data`` is given, else ``"dates"``.
        model: ``"rnn"`` (`models.rnn_seq2seq`) or ``"transformer"``
            (`models.transformer_seq2seq`); for ``task="lm"``, the ``kind`` of
            `models.language_model`, which may also be one of `BLOCK_MODELS`
            (``"mingru"``, ``"minlstm"``, ``"rglru"``, ``"xlstm"``). None:
            ``"rnn"``, or ``"transformer"`` for ``task="lm"``.
        cell: recurrent cell of ``model="rnn"``, a name of `CELLS` (the cell
            registry, `keras_seq.models.register_cell`): built in ``"gru"``,
            ``"lstm"``, ``"peephole"``, ``"coupled"``, ``"simple"`` (Elman),
            ``"layernorm_lstm"``, ``"mingru"``, ``"minlstm"``. None:
            ``"gru"``, or ``"lstm"`` for ``task="lm"``.
        attention: ``"bahdanau"``, ``"luong"``, ``"monotonic_bahdanau"``,
            ``"monotonic_luong"`` (`models.rnn_seq2seq`'s) or ``"none"``
            (``model="rnn"``, translation).
        zoneout: zoneout rate of the recurrent layers of ``model="rnn"``
            translation models (0: none), any ``cell``.
        scheduled_sampling: ``model="rnn"`` translation models: the largest
            probability P in [0, 1] of feeding the decoder, in training, a
            token sampled from its own prediction at the step before instead
            of the reference token (Bengio et al. 2015); 0: teacher forcing.
        sampling_schedule: how that probability grows over the training
            steps: ``"constant"`` (P throughout), ``"linear"`` (from 0 to P)
            or ``"inverse_sigmoid"`` (Bengio et al.'s decay, half of P
            halfway); `keras_seq.training.scheduled_sampling`.
        data: a ``source<TAB>target`` file (``task="translate"``), a UTF-8
            text (``task="lm"``) or a ``label<TAB>text`` file
            (``task="classify"``, `keras_seq.data.load_labelled_tsv`), split
            80/10/10 by label (`keras_seq.data.split_labelled`).
        test_data: ``task="classify"``: a ``label<TAB>text`` file of test
            texts; ``data`` is then split 90/10 into training and validation.
            None: the test texts are 10% of ``data``.
        class_weight: ``task="classify"``: ``"none"`` or ``"balanced"`` (each
            training text of class c weighs n / (classes · n_c), the loss's
            sample weights).
        init_from: ``task="classify"``: the run folder of a ``task="lm"``
            run whose embedding and blocks the classifier starts from, with
            its tokenizer; ``model``, ``cell``, ``units``, ``layers`` and
            ``tokenizer`` must be None or the language model's.
        lm_weight: λ of the auxiliary objective L = L_task + λ·L_LM with
            ``init_from`` (None: `AUXILIARY_LM_WEIGHT`, or 0 with
            ``freeze_body``); 0 fine-tunes on the task alone.
        freeze_body: with ``init_from``: train the linear head only (a
            linear probe of the language model; the default learning rate
            is then `LINEAR_PROBE_LEARNING_RATE`).
        pooling: ``task="classify"`` on a language model's body (``init_from``,
            or a block ``model``): what the linear head reads,
            ``"last"`` (the hidden state at the last real token) or
            ``"mean"`` (their mean over the real tokens;
            `keras_seq.models.classifier_from_language_model`).
        tokenizer: ``"char"`` (`keras_seq.text.CharTokenizer`, every
            character of the text) or, for ``task="bilm"`` and
            ``task="classify"`` only, ``"wordpiece"``
            (`keras_seq.text.WordPieceTokenizer` learned from the training
            text, newlines kept as tokens); the other tasks' ``translate``,
            ``generate`` and ``export`` read characters.
        vocab_size: ``tokenizer="wordpiece"``: the largest vocabulary to
            learn, reserved tokens and the newline included (None:
            `WORDPIECE_VOCAB_SIZE`); must be None for ``"char"``.
        epochs, batch_size, learning_rate, units, layers: None takes the
            model family's default (`default_for`); ``units`` is the recurrent
            width or the Transformer's model_dim; ``layers`` the Transformer
            blocks (each side) or, for ``task="lm"``, the recurrent layers.
        out: parent folder of the run folder.
        name: run folder name; None: ``<model>-<cell or layers x units>-<time>``.
        seed: seed of the data, the weights and the shuffling.
        train_size, validation_size, test_size: pairs of the date task (for a
            TSV file, the most validation and test pairs, see
            `keras_seq.data.split_pairs`). For ``task="lm"``,
            ``validation_size`` is the number of held-out windows scored
            after each epoch (None: the family default); the others are unused.
        context: ``task="lm"``: the window length the model trains on and
            is scored with (None: the family default; other tasks: must be None).
        steps_per_epoch: ``task="lm"``: batches per epoch (None: the family
            default; other tasks: must be None, an epoch is a pass over the pairs).
        max_source_length, max_target_length: caps on the padded lengths
            (None: 64, or for ``task="classify"`` `CLASSIFY_MAX_LENGTH`
            tokens of a text, which is cut there, and says so).
        length_buckets: translation tasks: training batches hold sources of
            similar length and are padded only as far as their bucket
            (`length_buckets`; ``make_dataset``'s ``bucket_lengths``), so short
            sources do not pay for the longest. False: every batch is padded to
            the longest training source.
        distribute: ``"auto"`` (`keras_seq.distribute.choose_strategy`:
            multi-worker when ``TF_CONFIG`` describes a cluster, mirrored over
            several local GPUs, else one device), ``"none"``, ``"mirrored"`` or
            ``"multi_worker"`` (`keras_seq.distribute.make_strategy`).
            ``batch_size`` is the global batch, a multiple of the replicas.
        precision: ``"float32"``, ``"mixed_float16"`` or ``"mixed_bfloat16"``:
            the Keras dtype policy of the run (the logits and the loss stay
            float32; ``mixed_float16`` adds loss scaling).
        backup_every_steps: also back up every N training steps (None: at
            the end of each epoch only).
        fresh: delete the run's backup (and logs) and start over, also over
            a finished run.
        verbose: Keras' ``fit`` verbosity; 0 also silences the strategy and
            ``Resuming`` lines. 1, a progress bar, is one line per epoch
            (2) when standard output is not a terminal (`fit_verbosity`).
    """

    model: str | None = None
    cell: str | None = None
    attention: str = "bahdanau"
    data: str | None = None
    epochs: int | None = None
    batch_size: int | None = None
    out: str = "runs"
    name: str | None = None
    seed: int = 0
    train_size: int = 50_000
    validation_size: int | None = None
    test_size: int = 10_000
    units: int | None = None
    layers: int | None = None
    learning_rate: float | None = None
    max_source_length: int | None = None
    max_target_length: int = _TRANSLATE_MAX_LENGTH
    length_buckets: bool = True
    distribute: str = "auto"
    precision: str = "float32"
    backup_every_steps: int | None = None
    fresh: bool = False
    verbose: int = 1

    @property
    def fit_verbosity(self) -> int:
        """The ``verbose`` that `fit` gets: `verbose`, except that a progress bar
        (1) becomes one line per epoch (2) when standard output is not a
        terminal. Off a terminal, Keras' bar writes each of its updates (up to
        20 a second) as a new line, which would fill a log file."""
        if self.verbose == 1 and not (sys.stdout and sys.stdout.isatty()):
            return 2
        return self.verbose
    task: str | None = None
    context: int | None = None
    steps_per_epoch: int | None = None
    zoneout: float = 0.0
    scheduled_sampling: float = 0.0
    sampling_schedule: str = "constant"
    tokenizer: str = "char"
    vocab_size: int | None = None
    test_data: str | None = None
    class_weight: str = "none"
    init_from: str | None = None
    lm_weight: float | None = None
    freeze_body: bool = False
    pooling: str = "last"

    def resolved(self) -> TrainingConfig:
        """A checked copy with the task and the family defaults filled in."""
        where = "TrainingConfig"
        task = self.task
        if task is None:
            task = "dates" if self.data is None else "translate"
        check_choice(where, "task", task, TASKS)
        if task == "dates" and self.data is not None:
            raise invalid_value(
                where, "data", "None for task 'dates' (a TSV file means task 'translate', "
                "a text file task 'lm')", self.data,
            )
        if task == "translate" and self.data is None:
            raise invalid_value(where, "data", "a TSV file for task 'translate'", None)
        fine_tune = self._check_classify_options(where, task)
        # Fine-tuning: the model's kind, cell and sizes are the language
        # model's, filled in from its run folder (`keras_seq.training.load_data`).
        model = self.model if self.model is not None or fine_tune else (
            "transformer" if task == "lm" else "rnn"
        )
        if model is not None:
            check_choice(where, "model", model, MODELS)
        if model in BLOCK_MODELS and task not in ("lm", "classify"):
            raise invalid_value(where, "model", f"'rnn' or 'transformer' for task {task!r} "
                                f"({', '.join(BLOCK_MODELS)} are language models: task 'lm', "
                                "or 'classify' with a language model's body)", model)
        if task == "bilm" and model != "rnn":
            raise invalid_value(where, "model", "'rnn' for task 'bilm' (ELMo's biLM is "
                                "recurrent)", model)
        default_cell = {"lm": "lstm", "bilm": "coupled"}.get(task, "gru")
        cell = self.cell if self.cell is not None or fine_tune else default_cell
        if self.cell is not None:  # the defaults are built in
            check_choice(where, "cell", cell, CELLS)
        check_choice(where, "attention", self.attention, ATTENTIONS)
        zoneout = check_float(where, "zoneout", self.zoneout, low=0.0, high=1.0,
                              high_inclusive=False)
        if zoneout and (model != "rnn" or task in (*TEXT_TASKS, "classify")):
            raise invalid_value(where, "zoneout",
                                "0 except for model 'rnn' translation models", zoneout)
        sampled = check_float(where, "scheduled_sampling", self.scheduled_sampling, low=0.0,
                              high=1.0)
        if sampled and (model != "rnn" or task in (*TEXT_TASKS, "classify")):
            raise invalid_value(where, "scheduled_sampling",
                                "0 except for model 'rnn' translation models", sampled)
        check_choice(where, "sampling_schedule", self.sampling_schedule, SAMPLING_SCHEDULES)
        if self.sampling_schedule != "constant" and not sampled:
            raise invalid_value(where, "sampling_schedule", "'constant' without "
                                "scheduled_sampling (the schedule of a probability > 0)",
                                self.sampling_schedule)
        check_choice(where, "tokenizer", self.tokenizer, TOKENIZERS)
        if self.tokenizer == "wordpiece" and task not in ("bilm", "classify"):
            raise invalid_value(
                where, "tokenizer", f"'char' for task {task!r} ('wordpiece' is for tasks "
                "'bilm' and 'classify' only: translate, generate and export read characters)",
                self.tokenizer,
            )
        vocab_size = self.vocab_size
        if self.tokenizer == "wordpiece":
            # More than the reserved tokens and the newline.
            vocab_size = check_int(
                where, "vocab_size", WORDPIECE_VOCAB_SIZE if vocab_size is None else vocab_size,
                minimum=len(RESERVED_TOKENS) + 2,
            )
        elif vocab_size is not None:
            raise invalid_value(
                where, "vocab_size", "None unless tokenizer='wordpiece' (a character "
                "vocabulary is every character of the text)", vocab_size,
            )
        check_choice(where, "distribute", self.distribute, DISTRIBUTIONS)
        check_choice(where, "precision", self.precision, PRECISIONS)
        check_bool(where, "fresh", self.fresh)
        keys = _FAMILY_KEYS + (_LM_KEYS if task in TEXT_TASKS else ())
        if task == "classify":
            if self.validation_size is not None:
                raise invalid_value(where, "validation_size", "None for task 'classify' (its "
                                    "split is 80/10/10 by label)", self.validation_size)
            keys = tuple(k for k in keys if k != "validation_size")
        if fine_tune:
            defaults = {**FINE_TUNE_DEFAULTS, "units": None, "layers": None}
            if self.freeze_body:
                defaults["learning_rate"] = LINEAR_PROBE_LEARNING_RATE
        else:
            # The cell as given: the default cell's defaults need no Keras.
            defaults = {key: default_for(key, model, self.cell, task) for key in keys}
        values = {key: defaults[key] if getattr(self, key) is None else getattr(self, key)
                  for key in keys}
        if task not in TEXT_TASKS:
            for key in _LM_KEYS:
                if getattr(self, key) is not None:
                    raise invalid_value(where, key, "None (it is an option of tasks 'lm' and "
                                        "'bilm')", getattr(self, key))
        for key in ("epochs", "batch_size", "units", "layers", "validation_size", *_LM_KEYS):
            if key in values:
                values[key] = check_positive_int(where, key, values[key],
                                                 allow_none=fine_tune)
        values["learning_rate"] = check_float(
            where, "learning_rate", values["learning_rate"], low=0.0, low_inclusive=False
        )
        values.update(task=task, model=model, cell=cell, zoneout=float(zoneout),
                      scheduled_sampling=float(sampled),
                      vocab_size=vocab_size)
        max_source_length = self.max_source_length
        if max_source_length is None:
            max_source_length = CLASSIFY_MAX_LENGTH if task == "classify" else (
                _TRANSLATE_MAX_LENGTH)
        values["max_source_length"] = check_positive_int(where, "max_source_length",
                                                         max_source_length)
        for key in ("train_size", "test_size", "max_target_length"):
            values[key] = check_positive_int(where, key, getattr(self, key))
        values["seed"] = check_int(where, "seed", self.seed)
        values["backup_every_steps"] = check_positive_int(
            where, "backup_every_steps", self.backup_every_steps, allow_none=True
        )
        lm_weight = self.lm_weight
        if fine_tune and lm_weight is None:
            lm_weight = 0.0 if self.freeze_body else AUXILIARY_LM_WEIGHT
        values["lm_weight"] = None if lm_weight is None else float(lm_weight)
        return dataclasses.replace(self, **values)

    def _check_classify_options(self, where: str, task: str) -> bool:
        """The options of ``task="classify"`` checked; whether it fine-tunes a
        language model (``init_from``)."""
        classify_only = {"test_data": None, "init_from": None, "class_weight": "none"}
        for key, unset in classify_only.items():
            if task != "classify" and getattr(self, key) != unset:
                raise invalid_value(where, key, f"{unset!r} unless task='classify'",
                                    getattr(self, key))
        check_choice(where, "class_weight", self.class_weight, CLASS_WEIGHTS)
        if task == "classify" and self.data is None:
            raise invalid_value(where, "data", "a label<TAB>text file for task 'classify'", None)
        fine_tune = self.init_from is not None
        check_bool(where, "freeze_body", self.freeze_body)
        check_choice(where, "pooling", self.pooling, POOLINGS)
        if self.pooling != "last" and not (
                task == "classify" and (fine_tune or self.model in BLOCK_MODELS)):
            raise invalid_value(
                where, "pooling", "'last' unless task='classify' reads a language model's body "
                f"(init_from, or model {', '.join(map(repr, BLOCK_MODELS))}); the other "
                "classifiers average their encoder's outputs", self.pooling)
        if not fine_tune:
            for key, unset in (("lm_weight", None), ("freeze_body", False)):
                if getattr(self, key) != unset:
                    raise invalid_value(
                        where, key, f"{unset!r} without init_from (it is an option of "
                        "fine-tuning a language model)", getattr(self, key))
            return False
        if self.lm_weight is not None:
            check_float(where, "lm_weight", self.lm_weight, low=0.0)
            if self.freeze_body and self.lm_weight > 0:
                raise invalid_value(
                    where, "lm_weight", "0 or None with freeze_body (a frozen body and its "
                    "language-model head learn nothing from the auxiliary loss)", self.lm_weight)
        return True
