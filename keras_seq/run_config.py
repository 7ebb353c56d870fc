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

from keras_seq import model_kinds, recipes
from keras_seq._validation import (
    Arg,
    ArgumentValueError,
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_positive_int,
)
from keras_seq.recipes.classification import (
    AUXILIARY_LM_WEIGHT,
    CLASS_WEIGHTS,
    CLASSIFY_DEFAULTS,
    CLASSIFY_MAX_LENGTH,
    FINE_TUNE_DEFAULTS,
    LINEAR_PROBE_LEARNING_RATE,
)
from keras_seq.recipes.language_model import (
    BILM_DEFAULTS,
    LM_DEFAULTS,
    TOKENIZERS,
    WORDPIECE_VOCAB_SIZE,
)
from keras_seq.recipes.recipe import listed
from keras_seq.recipes.translation import (
    ATTENTIONS,
    LSTM_FAMILY_DEFAULTS,
    MAX_LENGTH,
    MODEL_DEFAULTS,
    SAMPLING_SCHEDULES,
)

__all__ = [
    "ATTENTIONS",
    "AUXILIARY_LM_WEIGHT",
    "BACKUP_DIR",
    "BILM_DEFAULTS",
    "BLOCK_MODELS",
    "CELLS",
    "CLASSIFY_DEFAULTS",
    "CLASSIFY_MAX_LENGTH",
    "CLASS_WEIGHTS",
    "DISTRIBUTIONS",
    "FINE_TUNE_DEFAULTS",
    "GREEDY_ZERO_DEPRECATED",
    "LINEAR_PROBE_LEARNING_RATE",
    "LM_DEFAULTS",
    "LSTM_FAMILY_DEFAULTS",
    "MODELS",
    "MODEL_DEFAULTS",
    "NOT_IN_BACKUP",
    "POOLINGS",
    "PRECISIONS",
    "SAMPLING_SCHEDULES",
    "SEARCH_EMBEDDING_DIMS",
    "SEARCH_UNITS",
    "TASKS",
    "TOKENIZERS",
    "TUNERS",
    "TUNE_ATTENTIONS",
    "TrainingConfig",
    "WORDPIECE_VOCAB_SIZE",
    "default_for",
    "recorded_config",
]

TUNERS = ("random", "hyperband", "bayesian")
"""The ``tuner`` names of `keras_seq.tuning.search` (``keras-seq tune --tuner``)."""
GREEDY_ZERO_DEPRECATED = model_kinds.GREEDY_ZERO_DEPRECATED
"""What ``keras-seq translate`` says to ``--beam 0`` (`keras_seq.model_kinds`)."""
SEARCH_UNITS = (64, 128, 256)
"""The recurrent widths `keras_seq.tuning.Seq2SeqHyperModel` searches by default."""
SEARCH_EMBEDDING_DIMS = (32, 64)
"""The embedding widths `keras_seq.tuning.Seq2SeqHyperModel` searches by default."""

TASKS = tuple(recipes.RECIPES)
"""`TrainingConfig.task` choices: the names of the recipes (`keras_seq.recipes.RECIPES`)."""
BLOCK_MODELS = tuple(model_kinds.BLOCK_MODELS)
"""The `TrainingConfig.model` choices of language models of residual recurrent
blocks (`keras_seq.models.language_model`'s ``kind``; the names of
`keras_seq.model_kinds.BLOCK_MODELS`): ``task="lm"``, and ``"classify"`` with
a language model's body."""
MODELS = ("rnn", "transformer", *BLOCK_MODELS)
"""`TrainingConfig.model` choices (each task takes some: its recipe's ``models``)."""
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
TUNE_ATTENTIONS = ("bahdanau", "luong", "none")
"""The attentions `keras_seq.tuning` searches (the monotonic ones, for
streaming, are chosen, not searched)."""

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
    """The default of a per-family option of `TrainingConfig`: its task's recipe's
    (`keras_seq.recipes.Recipe.family_defaults`) for ``model`` and ``cell``.

    ``epochs``, ``batch_size``, ``learning_rate``, ``units``, ``layers``, and
    the options of the task that depend on the family (``validation_size``;
    ``steps_per_epoch`` and ``context`` of the language models). A fine-tuned
    classifier takes `FINE_TUNE_DEFAULTS` and its language model's sizes.
    For ``model="rnn"`` translation, ``cell`` is a registered cell name, whose
    family the registry tells (a cell of the LSTM family takes
    `LSTM_FAMILY_DEFAULTS`; reading the registry imports Keras), or None: the
    default cell, the GRU.

    Examples:
        >>> default_for("epochs"), default_for("epochs", cell="lstm"), default_for("units", "transformer")
        (2, 4, 96)
        >>> default_for("layers", "transformer", task="lm"), default_for("context", "transformer", task="lm")
        (4, 64)
        >>> default_for("epochs", task="classify")
        60
    """
    recipe = recipes.get(task, "default_for")
    check_choice("default_for", "model", model, recipe.models,
                 expected=(f"one of {', '.join(map(repr, recipe.models))} for task {task!r}",))
    defaults = recipe.family_defaults(model, cell)
    return defaults[check_choice("default_for", "key", key, tuple(defaults),
                                 expected=f"an option with a default for task {task!r}: "
                                 + ", ".join(map(repr, defaults)))]


@dataclasses.dataclass
class TrainingConfig:
    """What `train` does; the fields are ``keras-seq train``'s options.

    Attributes:
        task: the recipe (`keras_seq.recipes`) of the run, one of `TASKS`:
            ``"dates"`` (the embedded date task), ``"translate"`` (a TSV
            file, ``data``), ``"lm"`` (a character language model of a
            text file, ``data``, by default tiny Shakespeare), ``"bilm"``
            (ELMo's bidirectional language model,
            `models.bidirectional_language_model`, of a text file, by
            default tiny Shakespeare, in ``tokenizer`` tokens),
            ``"classify"`` (a text classifier of a ``label<TAB>text`` file,
            ``data``; from scratch, or fine-tuned from the language model
            run ``init_from``) or ``"tag"`` (a sequence tagger of a
            ``token<TAB>tag`` file, a blank line between sentences, ``data``). None: ``"translate"`` when
            ``data`` is given, else ``"dates"``.
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
            halfway); `keras_seq.tasks.scheduled_sampling`.
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
    max_target_length: int = MAX_LENGTH
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
        """A checked copy with the task and its defaults filled in.

        Every option belongs to the tasks that read it (their recipe's
        ``options``, `keras_seq.recipes`; the common ones to all): one given
        to a task that does not read it is a ``ValueError`` naming the tasks
        that do. The task's recipe then checks its own options and fills in
        its defaults (`keras_seq.recipes.Recipe.resolve`).
        """
        where = "TrainingConfig"
        task = self.task
        if task is None:
            task = "dates" if self.data is None else "translate"
        recipe = recipes.get(task)
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if (field.name in recipes.COMMON_OPTIONS or field.name in recipe.options
                    or value == field.default):
                continue
            takers = [Arg("task", r.name) for r in recipes.RECIPES.values()
                      if field.name in r.options]
            raise ArgumentValueError(
                where, Arg(field.name, value), " is an option of ", *listed(takers),
                "; received ", Arg("task", task), ".")
        values = recipe.resolve(dataclasses.replace(self, task=task))
        check_choice(where, "distribute", self.distribute, DISTRIBUTIONS)
        check_choice(where, "precision", self.precision, PRECISIONS)
        check_bool(where, "fresh", self.fresh)
        fine_tune = values.get("model") is None  # sizes read from the language model's run
        for key in ("epochs", "batch_size", "units", "layers", "validation_size", "context",
                    "steps_per_epoch"):
            if values.get(key) is not None or (key in values and not fine_tune):
                values[key] = check_positive_int(where, key, values[key], allow_none=fine_tune)
        values["learning_rate"] = check_float(where, "learning_rate", values["learning_rate"],
                                              low=0.0, low_inclusive=False)
        for key in ("zoneout", "scheduled_sampling", "lm_weight"):
            if values.get(key, getattr(self, key)) is not None:
                values[key] = float(values.get(key, getattr(self, key)))
        values["seed"] = check_int(where, "seed", self.seed)
        values["backup_every_steps"] = check_positive_int(
            where, "backup_every_steps", self.backup_every_steps, allow_none=True
        )
        return dataclasses.replace(self, task=task, **values)


def recorded_config(config: dict) -> TrainingConfig:
    """The `TrainingConfig` of a run from the options its folder recorded
    (``metrics.json``'s ``config``, resolved when it was trained; the sizes
    it also records are left out)."""
    names = {field.name for field in dataclasses.fields(TrainingConfig)}
    return TrainingConfig(**{k: v for k, v in config.items() if k in names})
