"""Translation (``--task dates`` and ``--task translate``): a `keras_seq.tasks.Seq2SeqLM`
trained on source<TAB>target pairs, scored by held-out exact match."""

from __future__ import annotations

import dataclasses
from typing import Any

from keras_seq import model_kinds
from keras_seq._validation import (
    Arg,
    ArgumentValueError,
    check_choice,
    check_float,
    check_positive_int,
    invalid_value,
)
from keras_seq.recipes.recipe import Recipe

__all__ = [
    "ATTENTIONS",
    "LSTM_FAMILY_DEFAULTS",
    "MODEL_DEFAULTS",
    "PreparedData",
    "SAMPLING_SCHEDULES",
    "Translation",
    "length_buckets",
    "load_pairs",
]

# Per model family: values measured to reach the accuracy targets on the date
# task within the time budget on a 2-core CPU (see README). Width 96 for the
# Transformer (4 heads, feed-forward 384): 99.95% like width 128 on the dates,
# in three quarters of the time. The LSTM family learns the date task more
# slowly per epoch than the GRU, hence its epochs; the Elman RNN ("simple")
# takes the GRU's (see benchmarks/RESULTS.md for its accuracy).
MODEL_DEFAULTS = {
    "rnn": {"epochs": 2, "batch_size": 128, "learning_rate": 3e-3, "units": 64, "layers": 2,
            "validation_size": 2_000},
    "transformer": {"epochs": 4, "batch_size": 128, "learning_rate": 2e-3, "units": 96,
                    "layers": 2, "validation_size": 2_000},
}
"""Per model family (``rnn``, ``transformer``): the defaults of the translation tasks."""
LSTM_FAMILY_DEFAULTS = {"epochs": 4}
"""Over ``MODEL_DEFAULTS["rnn"]``: the translation defaults of a cell of the LSTM
family, one that carries h and c (two states in its ``state_size``,
`keras_seq.layers.recurrent.registry.is_lstm_family`)."""
ATTENTIONS = ("bahdanau", "luong", "monotonic_bahdanau", "monotonic_luong", "none")
"""`TrainingConfig.attention` choices."""
SAMPLING_SCHEDULES = model_kinds.SAMPLING_SCHEDULES
"""`TrainingConfig.sampling_schedule` choices (`keras_seq.model_kinds`)."""
MAX_LENGTH = 64
"""The default caps on the padded source and target lengths."""
SERVING_MODEL = "translator"
"""The SavedModel of a translation run's export: ``OUT/translator/1``."""


class Translation(Recipe):
    """A translator (`keras_seq.tasks.Seq2SeqLM`: `models.rnn_seq2seq` or
    `models.transformer_seq2seq`) of pairs: the embedded date task
    (``name="dates"``, `keras_seq.data.date_task`) or a ``source<TAB>target``
    file (``name="translate"``), split into training, validation and test
    pairs. A character tokenizer shared by sources and targets; the padded
    cross-entropy, teacher-forced or with scheduled sampling; greedy
    decoding of the test pairs, scored by exact match."""

    options = ("attention", "zoneout", "scheduled_sampling", "sampling_schedule", "train_size",
               "validation_size", "test_size", "max_source_length", "max_target_length",
               "length_buckets")
    models = ("rnn", "transformer")
    noun = "translation model"
    uses = "translate_texts"
    data = "source<TAB>target file."
    formats = ("savedmodel", "tflite", "onnx")
    recorded_sizes = ("source_length", "target_length")

    def __init__(self, name: str, pairs_file: bool):
        self.name = name
        self.pairs_file = pairs_file
        if pairs_file:
            self.options = ("data", *self.options)
            self.summary = "a parallel corpus, --data FILE.tsv (source<TAB>target)"
        else:
            self.summary = "the embedded date task (the main job)"

    def family_defaults(self, model, cell):
        defaults = dict(MODEL_DEFAULTS[model])
        if model == "rnn" and cell is not None:
            from keras_seq.layers.recurrent import registry

            if registry.is_lstm_family(registry.check_cell(cell, "TrainingConfig")):
                defaults.update(LSTM_FAMILY_DEFAULTS)
        return defaults

    def resolve(self, config) -> dict:
        values = super().resolve(config)
        return {**values, "max_source_length": check_positive_int(
            "TrainingConfig", "max_source_length", config.max_source_length or MAX_LENGTH)}

    def check(self, config) -> None:
        where = "TrainingConfig"
        if self.pairs_file and config.data is None:
            raise invalid_value(where, "data", ("a TSV file for ", Arg("task", self.name)), None)
        check_choice(where, "attention", config.attention, ATTENTIONS)
        check_float(where, "zoneout", config.zoneout, low=0.0, high=1.0, high_inclusive=False)
        check_float(where, "scheduled_sampling", config.scheduled_sampling, low=0.0, high=1.0)
        check_choice(where, "sampling_schedule", config.sampling_schedule, SAMPLING_SCHEDULES)
        if not config.scheduled_sampling and config.sampling_schedule != "constant":
            raise ArgumentValueError(
                where, Arg("sampling_schedule", config.sampling_schedule), " is the schedule of "
                "a probability above 0: it needs ", Arg("scheduled_sampling"), ".")
        if config.model != "rnn":
            for option in ("attention", "zoneout", "scheduled_sampling"):
                value, default = getattr(config, option), _DEFAULTS[option]
                if value != default:
                    raise ArgumentValueError(
                        where, Arg(option, value), " is an option of ", Arg("model", "rnn"),
                        " translation models; received ", Arg("model", config.model), ".")
        for key in ("train_size", "test_size", "max_target_length", "validation_size"):
            check_positive_int(where, key, getattr(config, key))

    # --- the data ---

    def read(self, config):
        return load_pairs(config)

    def prepare(self, config, loaded, replicas=1):
        from keras_seq import data, text
        from keras_seq.data.pipeline import data_sharding

        train_pairs, validation_pairs, test_pairs = loaded
        tokenizer = text.CharTokenizer.from_corpus(s for pair in train_pairs for s in pair)
        source_length = _max_length(tokenizer, (s for s, _ in train_pairs), 0,
                                    config.max_source_length)
        # +1 for [START]/[END]
        target_length = _max_length(tokenizer, (t for _, t in train_pairs), 1,
                                    config.max_target_length)
        buckets = length_buckets(source_length) if config.length_buckets else ()
        train_data, validation_data = (
            data.make_dataset(
                pairs, tokenizer, tokenizer, config.batch_size, source_length, target_length,
                shuffle_seed=config.seed if training else None,
                bucket_lengths=(buckets or None) if training else None,
            ).with_options(data_sharding())
            for pairs, training in ((train_pairs, True), (validation_pairs, False))
        )
        return PreparedData(
            train_pairs, validation_pairs, test_pairs, tokenizer, source_length, target_length,
            train_data, validation_data, config.batch_size, config.seed, buckets,
        )

    # --- the model ---

    def build(self, config, prepared):
        from keras_seq import models
        from keras_seq.tasks import Seq2SeqLMPreprocessor

        vocabulary_size = prepared.tokenizer.vocabulary_size
        if config.model == "rnn":
            task = models.rnn_seq2seq(
                vocabulary_size, vocabulary_size, units=config.units, cell=config.cell,
                attention=None if config.attention == "none" else config.attention,
                zoneout=config.zoneout,
            )
        else:
            task = models.transformer_seq2seq(
                vocabulary_size, vocabulary_size, num_layers=config.layers,
                model_dim=config.units, num_heads=4, intermediate_dim=4 * config.units,
                dropout=0.1,
            )
        task.preprocessor = Seq2SeqLMPreprocessor(prepared.tokenizer, prepared.source_length,
                                                  prepared.target_length)
        return task

    def trainer(self, task, config, prepared):
        if not config.scheduled_sampling:
            return task
        from keras_seq.tasks.scheduled_sampling import ScheduledSampling

        return ScheduledSampling(task, config.scheduled_sampling, config.sampling_schedule,
                                 total_steps=config.epochs * prepared.steps_per_epoch,
                                 seed=config.seed)

    def compile(self, model, config, steps):
        from keras_seq.recipes.optimization import compile_run, padded_cross_entropy

        compile_run(model, config, steps, loss=padded_cross_entropy())

    # --- the scores ---

    def score(self, task, prepared, config, replicas):
        from keras_seq.decoding.strings import make_decoder, translate_strings
        from keras_seq.run_folder import HELD_OUT_FILE

        test_pairs = prepared.test_pairs
        decode = make_decoder(task, prepared.source_length, prepared.target_length)
        sources = [s for s, _ in test_pairs]
        outputs = translate_strings(decode, prepared.tokenizer, sources, prepared.source_length)
        correct = sum(o == t for o, (_, t) in zip(outputs, test_pairs))
        rows = [{"source": s, "target": t, "output": o} for (s, t), o in zip(test_pairs, outputs)]
        metrics = {
            "test_exact_match": correct / len(test_pairs),
            # How far the outputs keep the source's order (`out_of_source_order`).
            "out_of_source_order": out_of_source_order(test_pairs),
            "replicas": replicas,
            "test_examples": len(test_pairs),
            "test_correct": correct,
            "train_examples": len(prepared.train_pairs),
            "decoding": "greedy",
            "examples": rows[:5],
            "errors": [row for row in rows if row["output"] != row["target"]][:50],
        }
        figures = {}
        if config.model == "transformer" or config.attention != "none":
            figures["attention.png"] = lambda path: attention_figure(
                task, prepared.tokenizer, sources[:3], outputs[:3], prepared.source_length,
                prepared.target_length, path)
        held_out = (HELD_OUT_FILE, "".join(f"{s}\t{t}\n" for s, t in test_pairs))
        recorded = {"source_length": prepared.source_length,
                    "target_length": prepared.target_length}
        return metrics, held_out, figures, recorded

    def result_line(self, metrics):
        return (f"Held-out exact match: {metrics['test_exact_match']:.4%} "
                f"({metrics['test_correct']}/{metrics['test_examples']})")

    def result_warnings(self, metrics, config):
        """A monotonic attention below `MONOTONIC_FLOOR` exact match on outputs
        that reorder their source (`MONOTONIC_ORDER_LIMIT`): why, in one line."""
        attention = config.attention or ""
        reordered = metrics.get("out_of_source_order") or 0.0
        if (not attention.startswith("monotonic") or reordered < MONOTONIC_ORDER_LIMIT
                or metrics["test_exact_match"] >= MONOTONIC_FLOOR):
            return []
        return [
            f"the {attention} attention reached {metrics['test_exact_match']:.2%} held-out "
            f"exact match, and {reordered:.0%} of the output characters that copy the source "
            "come out of the source's order: monotonic attention reads the source once, left "
            "to right, so it fits outputs that follow the source's order (doubling letters, "
            "transliteration), not outputs that reorder it (a date's year, last in the "
            "source, first in the output); use the bahdanau or luong attention"]

    # --- the exports ---

    def default_formats(self, run):
        return ("savedmodel", "tflite", "onnx")

    def export(self, run, out, formats, beam_width, quantize, examples, progress,
               calibration=None):
        from keras_seq.export.translation_export import export_translation

        return export_translation(run, out, formats or ("savedmodel",), beam_width, quantize,
                                  examples, progress, calibration)


_DEFAULTS = {"attention": "bahdanau", "zoneout": 0.0, "scheduled_sampling": 0.0}


@dataclasses.dataclass
class PreparedData:
    """What `Translation.prepare` returns: the splits, the tokenizer and the datasets.

    Attributes:
        train_pairs, validation_pairs, test_pairs: ``(source, target)`` strings.
        tokenizer: the `keras_seq.text.CharTokenizer` of the training pairs
            (sources and targets share it).
        source_length, target_length: padded lengths of the model's inputs.
        train_data, validation_data: `keras_seq.data.make_dataset` datasets;
            the training one reshuffles each epoch with ``config.seed`` (for
            `fit` over all epochs at once; `train` uses `epochs_data`).
        batch_size, seed: the config's, for `epochs_data`.
        bucket_lengths: the training batches' source-length buckets (empty:
            none), see `length_buckets`.
    """

    train_pairs: list
    validation_pairs: list
    test_pairs: list
    tokenizer: Any
    source_length: int
    target_length: int
    train_data: Any
    validation_data: Any
    batch_size: int
    seed: int
    bucket_lengths: tuple = ()

    @property
    def steps_per_epoch(self) -> int:
        """Batches in an epoch (a pass over the training pairs)."""
        return -(-len(self.train_pairs) // self.batch_size)

    def epochs_data(self, first_epoch: int, epochs: int, skip: int = 0):
        """The training batches of epochs ``first_epoch .. epochs - 1``, ``skip`` batches
        dropped: each epoch's order depends only on the seed and the epoch number,
        so a resumed run sees the batches an uninterrupted one sees."""
        from keras_seq import data
        from keras_seq.data.pipeline import data_sharding

        batches = data.make_dataset(
            self.train_pairs, self.tokenizer, self.tokenizer, self.batch_size,
            self.source_length, self.target_length, shuffle_seed=self.seed,
            first_epoch=first_epoch, epochs=epochs, bucket_lengths=self.bucket_lengths or None,
        )
        return batches.skip(skip).with_options(data_sharding())


MONOTONIC_FLOOR = 0.5
"""A monotonic attention's held-out exact match below which `train` warns,
when the outputs reorder the source (the dates: 0.03% to 0.3%; doubling
vowels, whose alignment is monotonic: 99% in 10 epochs)."""
MONOTONIC_ORDER_LIMIT = 0.1
"""The share of `out_of_source_order` from which a low monotonic run is
said to be explained by the outputs' order (the dates: 0.30; doubling
vowels: 0)."""


def out_of_source_order(pairs, limit: int = 300, length: int = 200) -> float:
    """Of the target characters that their source also holds, the share that
    no left-to-right reading of the source gives in order: 1 − Σ LCS(s, t) /
    Σ |s ∩ t| (multisets) over the first ``limit`` pairs, each cut to
    ``length`` characters. 0 for outputs that keep the source's order
    (doubling its vowels); the dates, whose year moves to the front: 0.3.
    Characters shared by chance (two languages' letters) count too, so a
    translation scores high as well: a hint, used with a low result only."""
    from collections import Counter

    shared = ordered = 0
    for source, target in pairs[:limit]:
        source, target = source[:length], target[:length]
        common = sum((Counter(source) & Counter(target)).values())
        if common:
            shared += common
            ordered += _common_subsequence(source, target)
    return 1.0 - ordered / shared if shared else 0.0


def _common_subsequence(a: str, b: str) -> int:
    """The length of the longest common subsequence of ``a`` and ``b``."""
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def load_pairs(config) -> tuple[list, list, list]:
    """``(train, validation, test)`` pairs: the date task, or a split of ``config.data``.

    Raises:
        FileNotFoundError: ``config.data`` does not exist.
        ValueError: naming the file: a line that is not ``source<TAB>target``,
            invalid UTF-8, or fewer than 3 pairs.
    """
    from keras_seq import data
    from keras_seq.folders import data_file

    if config.data is None:
        task = data.date_task(
            train_size=config.train_size,
            validation_size=config.validation_size,
            test_size=config.test_size,
            seed=config.seed,
        )
        return task["train"], task["validation"], task["test"]
    path = data_file(Translation.data, config.data)
    pairs = data.load_tsv(path)
    if len(pairs) < 3:
        raise ArgumentValueError(
            "train", f"{path} holds {len(pairs)} source<TAB>target pair(s); a translation "
            "task needs at least 3 (one each for training, validation and test)."
        )
    task = data.split_pairs(
        pairs, validation_size=config.validation_size, test_size=config.test_size,
        seed=config.seed,
    )
    return task["train"], task["validation"], task["test"]


def length_buckets(source_length: int) -> tuple[int, ...]:
    """Source-length buckets of the training batches: 8, 12, 18, 27, ... (×1.5,
    rounded up) below ``source_length``.

    Each bucket is one more batch shape, so one more compilation of the
    recurrent loops (about a second each on CPU); growing by half bounds the
    padding of a batch to about a third of its width.

    Examples:
        >>> length_buckets(31), length_buckets(64), length_buckets(8)
        ((8, 12, 18, 27), (8, 12, 18, 27, 41, 62), ())
    """
    buckets, bound = [], 8
    while bound < source_length:
        buckets.append(bound)
        bound = -(-3 * bound // 2)
    return tuple(buckets)


def _max_length(tokenizer, strings, extra, cap):
    lengths = tokenizer.tokenize(list(strings)).row_lengths()
    return int(min(cap, int(lengths.numpy().max()) + extra))


def attention_figure(model, tokenizer, sources, outputs, source_length, target_length, path):
    """Draws the attention weights (output tokens x source tokens) for a few examples."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import tensorflow as tf

    from keras_seq import decoding
    from keras_seq.reserved_tokens import START_ID

    encoder_inputs = tokenizer.encode(sources, source_length)
    output_ids = tokenizer.encode(outputs, target_length, add_end=True)
    decoder_inputs = tf.concat(
        [tf.fill([len(sources), 1], START_ID), output_ids[:, :-1]], axis=1
    )
    alpha = np.asarray(decoding.attention_weights(model, encoder_inputs, decoder_inputs))
    title = (
        "Bahdanau attention weights α (greedy decoding)"
        if model.recurrent
        else "Cross-attention of the last decoder block, mean over heads (greedy decoding)"
    )

    fig, axes = plt.subplots(1, len(sources), figsize=(4.2 * len(sources), 4.5))
    for ax, source, output, a in zip(np.atleast_1d(axes), sources, outputs, alpha):
        source_tokens = [tokenizer.vocabulary[int(i)] for i in tokenizer.tokenize([source])[0]]
        output_tokens = [tokenizer.vocabulary[int(i)] for i in tokenizer.tokenize([output])[0]]
        output_tokens.append("[END]")
        ax.imshow(a[: len(output_tokens), : len(source_tokens)], cmap="viridis", vmin=0, vmax=1)
        ax.set_xticks(range(len(source_tokens)), source_tokens, fontsize=7)
        ax.set_yticks(range(len(output_tokens)), output_tokens, fontsize=7)
        ax.set_xlabel("source")
        ax.set_ylabel("output")
        ax.set_title(source, fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

