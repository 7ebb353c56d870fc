"""Text classification (``--task classify``): a `keras_seq.tasks.TextClassifier` of
``label<TAB>text`` lines, from scratch or fine-tuned from a language model's run."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from keras_seq import model_kinds
from keras_seq._validation import (
    Arg,
    ArgumentValueError,
    check_bool,
    check_choice,
    check_float,
    check_positive_int,
)
from keras_seq.recipes.language_model import language_model, learn_wordpiece, wordpiece_vocab_size
from keras_seq.recipes.recipe import Recipe, needs, no_beam

__all__ = [
    "AUXILIARY_LM_WEIGHT",
    "CLASSIFY_DEFAULTS",
    "CLASSIFY_MAX_LENGTH",
    "CLASS_WEIGHTS",
    "Classification",
    "FINE_TUNE_DEFAULTS",
    "LINEAR_PROBE_LEARNING_RATE",
    "PreparedLabels",
    "load_labelled",
    "with_language_model",
]

# Text classification (task="classify", models.sequence_classifier): a
# bidirectional GRU of 64 units or 2 Transformer encoder blocks of width 96
# (as the translation models), at most 60 passes over the training texts,
# stopped 10 epochs after the lowest validation loss with that epoch's
# weights kept (`Classification.early_stopping_patience`): a 105-line file
# needs about 40 (10 passes reached 72% of a 600-text test, 60 reached 89%),
# a large one stops once it overfits.
CLASSIFY_DEFAULTS = {
    "rnn": {"epochs": 60, "batch_size": 32, "learning_rate": 2e-3, "units": 64, "layers": 1},
    "transformer": {"epochs": 60, "batch_size": 32, "learning_rate": 1e-3, "units": 96,
                    "layers": 2},
    # A block model's classifier is its language model's body with a linear
    # head (as a fine-tuned one), from random weights: the language model's
    # width and depth.
    **{kind: {"epochs": 60, "batch_size": 32, "learning_rate": 2e-3, "units": 128, "layers": 4}
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
# Dropout of a classifier (Radford et al. fine-tune with 0.1 on the
# classifier and the body alike).
_CLASSIFIER_DROPOUT = 0.1


class Classification(Recipe):
    """A text classifier (`keras_seq.tasks.TextClassifier`) of ``label<TAB>text``
    lines (`keras_seq.data.load_labelled_tsv`), split 80/10/10 by label (with
    ``test_data``, 90/10 and that file's texts to test). From scratch:
    `models.sequence_classifier` (or a block language model's body with a
    linear head); with ``init_from`` a language model's run: its body and
    tokenizer, fine-tuned with the auxiliary objective L = L_task + λ·L_LM
    (``lm_weight``), or its head alone (``freeze_body``). Scored by accuracy
    and macro-F1 on the test texts."""

    name = "classify"
    summary = ("a text classifier of --data FILE.tsv (label<TAB>text), from scratch or "
               "fine-tuned from a --task lm run (--init-from)")
    options = ("data", "test_data", "class_weight", "init_from", "lm_weight", "freeze_body",
               "pooling", "tokenizer", "vocab_size", "max_source_length")
    models = ("rnn", "transformer", *model_kinds.BLOCK_MODELS)
    run_prefix = "classify-"
    noun = "text classifier"
    uses = "classify_texts"
    data = "label<TAB>text file."
    formats = ("savedmodel", "tflite", "onnx")
    recorded_sizes = ("source_length",)
    command = "classify"
    # Stops on the validation loss, the best epoch's weights kept: a small
    # file fits in many epochs, a large one stops once it overfits.
    early_stopping_patience = 10
    command_help = "print a trained classifier's label and its probability for each text"
    command_description = (
        "Classify each TEXT (or each line of --input FILE) with the classifier in RUN_DIR (a "
        "classification run of keras-seq train) and print one line per input, in order: the "
        "label, a tab, and its probability.")

    def family_defaults(self, model, cell):
        return dict(CLASSIFY_DEFAULTS[model])

    def resolve(self, config):
        where = "TrainingConfig"
        if config.data is None:
            raise ArgumentValueError(where, Arg("task", "classify"), " needs ", Arg("data"),
                                     ", a label<TAB>text file.")
        check_choice(where, "class_weight", config.class_weight, CLASS_WEIGHTS)
        check_choice(where, "pooling", config.pooling, model_kinds.CLASSIFIER_POOLINGS)
        check_bool(where, "freeze_body", config.freeze_body)
        for option in ("lm_weight", "freeze_body"):
            needs(where, config, option, "init_from", None,
                  "is an option of fine-tuning a language model")
        if config.pooling != "last" and not (config.init_from is not None
                                             or config.model in model_kinds.BLOCK_MODELS):
            raise ArgumentValueError(
                where, Arg("pooling", config.pooling), " is an option of a classifier that "
                "reads a language model's body (", Arg("init_from"), ", or ",
                Arg("model", "|".join(model_kinds.BLOCK_MODELS)), "); the others average "
                "their encoder's outputs")
        values = {"max_source_length": check_positive_int(
            where, "max_source_length", config.max_source_length or CLASSIFY_MAX_LENGTH),
            "vocab_size": wordpiece_vocab_size(config)}
        if config.init_from is None:
            return {**super().resolve(config), **values}
        # Fine-tuning: the model's kind, cell and sizes are the language
        # model's, filled in from its run folder (`with_language_model`).
        lm_weight = config.lm_weight
        if lm_weight is not None:
            lm_weight = check_float(where, "lm_weight", lm_weight, low=0.0)
            if config.freeze_body and lm_weight > 0:
                raise ArgumentValueError(
                    where, Arg("lm_weight", lm_weight), " needs to be 0 with ",
                    Arg("freeze_body", True), " (a frozen body and its language-model head "
                    "learn nothing from the auxiliary loss).")
        else:
            lm_weight = 0.0 if config.freeze_body else AUXILIARY_LM_WEIGHT
        defaults = dict(FINE_TUNE_DEFAULTS)
        if config.freeze_body:
            defaults["learning_rate"] = LINEAR_PROBE_LEARNING_RATE
        sizes = {key: getattr(config, key) if getattr(config, key) is not None else default
                 for key, default in defaults.items()}
        for key in ("units", "layers"):
            if getattr(config, key) is not None:
                sizes[key] = getattr(config, key)
        return {"model": config.model, "cell": config.cell, **sizes, **values,
                "lm_weight": float(lm_weight)}

    def takes_cell(self, model):
        return model == "rnn"

    # --- the data ---

    def complete(self, config):
        """With ``init_from``: the language model's kind, cell and sizes
        (`with_language_model`)."""
        return with_language_model(config)

    def read(self, config):
        return load_labelled(config)

    def prepare(self, config, loaded, replicas=1):
        import numpy as np

        from keras_seq import text
        from keras_seq.reserved_tokens import UNK_ID

        train, validation, test = loaded
        texts = [t for _, t in train]
        if config.init_from is not None:
            tokenizer = text.load_tokenizer(config.init_from)
        elif config.tokenizer == "wordpiece":
            tokenizer = learn_wordpiece(config, config.data, texts)
        else:
            tokenizer = text.CharTokenizer.from_corpus(texts)
        lengths = {part: tokenizer.tokenize([t for _, t in examples]).row_lengths().numpy()
                   for part, examples in (("train", train), ("validation", validation),
                                          ("test", test))}
        # Batches are padded to their longest text only: a generous cap costs nothing.
        source_length = config.max_source_length
        labels = sorted({label for label, _ in train})
        counts = np.bincount([labels.index(label) for label, _ in train],
                             minlength=len(labels))
        class_weights = None
        if config.class_weight == "balanced":
            class_weights = (len(train) / (len(labels) * counts)).astype(np.float32)
        unknown = int(np.sum(tokenizer.tokenize(texts).flat_values.numpy() == UNK_ID))
        prepared = PreparedLabels(
            train, validation, test, labels, tokenizer, source_length, class_weights,
            bool(config.lm_weight), None,
            {part: int(np.sum(n > source_length)) for part, n in lengths.items()},
            unknown, config.batch_size, config.seed,
        )
        prepared.validation_data = prepared.validation_batches(replicas)
        return prepared

    def notes(self, prepared, config):
        """The classes and their balance, and texts read otherwise than written."""
        counts = prepared.class_counts(prepared.train_examples)
        largest, smallest = max(counts), min(counts)
        lines = [
            f"Classes: {len(counts)}; training texts per class {smallest} to {largest}"
            + (f" (imbalance {largest / smallest:.1f}x; class weights {config.class_weight})"
               if largest > smallest else " (balanced)")
        ]
        if largest >= 2 * smallest and config.class_weight == "none":
            lines.append("Note: the classes are imbalanced; --class-weight balanced weighs each "
                         "class's texts by n / (classes x n_class).")
        cut = {part: n for part, n in prepared.truncated.items() if n}
        if cut:
            lines.append(
                "Note: texts longer than " f"{config.max_source_length} tokens are read up to "
                "there (--max-source-length): " + ", ".join(f"{n} {part}"
                                                             for part, n in cut.items()))
        if prepared.unknown_tokens:
            lines.append(f"Note: {prepared.unknown_tokens} tokens of the training texts are "
                         "outside the vocabulary and read as [UNK].")
        return lines

    # --- the model ---

    def build(self, config, prepared):
        from keras_seq import models
        from keras_seq.tasks import TextClassifierPreprocessor

        num_classes = len(prepared.labels)
        vocabulary_size = prepared.tokenizer.vocabulary_size
        if config.init_from is None and config.model not in model_kinds.BLOCK_MODELS:
            task = models.sequence_classifier(
                vocabulary_size, num_classes, kind=config.model, units=config.units,
                cell=config.cell, num_layers=config.layers, num_heads=4,
                intermediate_dim=4 * config.units, dropout=_CLASSIFIER_DROPOUT,
            )
        else:
            # A language model's body, built in this run's dtype policy (and
            # strategy scope) with dropout for fine-tuning: with init_from its
            # trained weights, otherwise (a block model from scratch) random ones.
            body = language_model(config, vocabulary_size, dropout=_CLASSIFIER_DROPOUT)
            if config.init_from is not None:
                body.load_weights(os.path.join(config.init_from, "model.keras"))
            if config.freeze_body:
                body.trainable = False
            task = models.classifier_from_language_model(
                body, num_classes, dropout=_CLASSIFIER_DROPOUT, lm_logits=bool(config.lm_weight),
                name="classifier", pooling=config.pooling,
            )
        task.preprocessor = TextClassifierPreprocessor(prepared.tokenizer,
                                                       prepared.source_length, prepared.labels)
        return task

    def compile(self, model, config, steps):
        import keras

        from keras_seq.recipes.optimization import compile_run, padded_cross_entropy

        task = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
        if not config.lm_weight:
            compile_run(model, config, steps, loss=task, metrics=[accuracy])
            return
        # The class's cross-entropy, plus λ times the next-token cross-entropy.
        compile_run(model, config, steps,
                    loss={"classes": task, "next_tokens": padded_cross_entropy()},
                    metrics={"classes": [accuracy]},
                    loss_weights={"classes": 1.0, "next_tokens": config.lm_weight})

    # --- the scores ---

    def score(self, task, prepared, config, replicas):
        import numpy as np

        from keras_seq.metrics import classification_scores, confusion_figure
        from keras_seq.run_folder import HELD_OUT_FILE
        from keras_seq.tasks.text_classifier import class_probabilities

        test = prepared.test_examples
        test_data = prepared.dataset(test).map(lambda ids, *_: ids)
        probabilities = class_probabilities(task, test_data)
        predicted = probabilities.argmax(axis=-1)
        true_ids = prepared.class_ids(test)
        labels = prepared.labels
        scores = classification_scores(true_ids, predicted, len(labels))
        rows = [
            {"text": text, "label": label, "predicted": labels[p],
             "probability": float(probabilities[i, p])}
            for i, ((label, text), p) in enumerate(zip(test, predicted))
        ]
        counts = {part: dict(zip(labels, prepared.class_counts(examples)))
                  for part, examples in (("train", prepared.train_examples),
                                         ("validation", prepared.validation_examples),
                                         ("test", test))}
        train_counts = list(counts["train"].values())
        weights = prepared.class_weights
        metrics = {
            "task": "classify",
            "labels": labels,
            "test_accuracy": scores["accuracy"],
            "test_macro_f1": scores["macro_f1"],
            "test_correct": int(np.sum(predicted == np.asarray(true_ids))),
            "test_examples": len(test),
            "train_examples": len(prepared.train_examples),
            "validation_examples": len(prepared.validation_examples),
            "confusion_matrix": scores["confusion_matrix"],
            "per_class": {
                label: {key: scores[key][i] for key in ("precision", "recall", "f1", "support")}
                for i, label in enumerate(labels)
            },
            "class_counts": counts,
            "imbalance": max(train_counts) / min(train_counts),
            "class_weights": None if weights is None else dict(zip(labels, map(float, weights))),
            "truncated_texts": prepared.truncated,
            "unknown_tokens": prepared.unknown_tokens,
            "replicas": replicas,
            "examples": rows[:5],
            "errors": [row for row in rows if row["predicted"] != row["label"]][:50],
        }
        figures = {"confusion.png": lambda path: confusion_figure(scores["confusion_matrix"],
                                                                  labels, path)}
        held_out = (HELD_OUT_FILE, "".join(f"{label}\t{text}\n" for label, text in test))
        return metrics, held_out, figures, {"source_length": prepared.source_length}

    def kept(self, task):
        """The classifier a run keeps: without the language model's logits."""
        return task.without_language_model()

    def result_line(self, metrics):
        return (f"Held-out accuracy: {metrics['test_accuracy']:.2%} ({metrics['test_correct']}/"
                f"{metrics['test_examples']}), macro-F1 {metrics['test_macro_f1']:.4f}")

    def use(self, run_dir, texts):
        """``keras-seq classify``'s lines: the label, a tab and its probability."""
        return [f"{label}\t{probability:.4f}"
                for label, probability in self.classify_texts(run_dir, texts)]

    def classify_texts(self, run_dir, texts, batch_size: int = 1000):
        """`keras_seq.training.classify_texts`: ``(label, probability)`` per text."""
        from keras_seq._backend import START_UNDER_TENSORFLOW, require_tensorflow
        from keras_seq._validation import invalid_type
        from keras_seq.recipes import read_run
        from keras_seq.tasks import from_run
        from keras_seq.text import warn_about_inputs

        require_tensorflow("keras_seq.training.classify_texts", START_UNDER_TENSORFLOW)
        where = "classify_texts"
        if isinstance(texts, (str, bytes)) or not all(isinstance(t, str) for t in texts):
            raise invalid_type(where, "texts", "a sequence of str", texts)
        batch_size = check_positive_int(where, "batch_size", batch_size)
        run = read_run(run_dir, where, task="classify")
        length = int(run.config["source_length"])
        tokenizer = run.load_tokenizer()
        texts = list(texts)
        warn_about_inputs(tokenizer, texts, length, done="classified")
        if not texts:
            return []
        return from_run(run).classify(texts, batch_size=batch_size)

    # --- the exports ---

    def default_formats(self, run):
        return ("savedmodel", "tflite")

    def export(self, run, out, formats, beam_width, quantize, examples, progress,
               calibration=None):
        from keras_seq.export.classifier_export import export_classifier

        no_beam(beam_width, "a classifier decodes nothing")
        return export_classifier(run, out, formats, quantize, examples, progress, calibration)


def load_labelled(config) -> tuple[list, list, list]:
    """``(train, validation, test)`` ``(label, text)`` lists of a classification run.

    ``config.data`` split 80/10/10 by label (`keras_seq.data.split_labelled`
    with ``config.seed``), or, with ``config.test_data``, ``config.data``
    split 90/10 and the test texts from that file.

    Raises:
        FileNotFoundError: a data file does not exist.
        ValueError: naming the file: a line that is not ``label<TAB>text``
            (`keras_seq.data.load_labelled_tsv`), one label only, a test label
            that no training text has, or too few texts for a validation and
            a test text.
    """
    from keras_seq import data
    from keras_seq.folders import data_file

    path = data_file(Classification.data, config.data)
    examples = data.load_labelled_tsv(path)
    labels = sorted({label for label, _ in examples})
    if len(labels) < 2:
        raise ArgumentValueError(
            "train", f"{path} has {'one label, ' + repr(labels[0]) if labels else 'no texts'}; "
            "a classifier needs texts of at least two labels (label<TAB>text lines)."
        )
    split = data.split_labelled(
        examples, validation_fraction=0.1, test_fraction=0.0 if config.test_data else 0.1,
        seed=config.seed,
    )
    if config.test_data is not None:
        test_path = data_file(Classification.data, config.test_data, "test_data")
        split["test"] = data.load_labelled_tsv(test_path)
        unseen = sorted({label for label, _ in split["test"]} - set(labels))
        if unseen:
            raise ArgumentValueError(
                "train", f"{test_path} has label(s) {', '.join(map(repr, unseen[:5]))} that no "
                f"text of {path} has; a classifier only predicts the labels it was trained on."
            )
    for part in ("validation", "test"):
        if not split[part]:
            raise ArgumentValueError(
                "train", f"{path} has {len(examples)} labelled texts, too few to hold out a "
                f"{part} text at 10% of a label (a label needs at least 5 texts, or 10 in all "
                "for a validation and a test text)."
            )
    return split["train"], split["validation"], split["test"]


def with_language_model(config):
    """``config`` with the ``model``, ``cell``, ``units`` and ``layers`` of its
    ``init_from`` language model filled in (unchanged without ``init_from``).

    Reads only the language model's ``metrics.json`` and ``tokenizer.json``,
    so that a mismatch stops the run before anything is built, and imports
    the modules of its user classes (`RunFolder.import_user_modules`).

    Raises:
        FileNotFoundError: ``init_from`` is not a run folder.
        UserModuleError: a module of the language model's user classes
            cannot be imported.
        ValueError: naming both runs: ``init_from`` is not a language model
            (``task="lm"``), or ``config`` asks for another model kind, cell,
            width, depth or tokenizer than the language model has.
    """
    import json

    from keras_seq.run_folder import read_run

    if config.init_from is None:
        return config
    target = os.path.join(config.out, config.name) if config.name else f"in {config.out}"
    lm = read_run(config.init_from, "train")
    if lm.config.get("task") != "lm":
        raise ArgumentValueError(
            "train", Arg("init_from", lm.path), f" is a {lm.config.get('task')!r} run, not a "
            "language model (", Arg("task", "lm"), f"); the classify run {target} starts from one."
        )
    asked = {key: getattr(config, key) for key in ("model", "cell", "units", "layers")}
    has = {key: lm.config.get(key) for key in asked}
    if has["model"] != "rnn":
        has["cell"] = None  # a Transformer has none
    with open(os.path.join(lm.path, "tokenizer.json"), encoding="utf-8") as f:
        lm_tokenizer = json.load(f).get("type")
    if lm_tokenizer != config.tokenizer or config.vocab_size is not None:
        asked_tokenizer = {"tokenizer": config.tokenizer, "vocab_size": config.vocab_size}
        raise ArgumentValueError(
            "train", "the vocabulary of ", Arg("init_from", lm.path), f" ({lm_tokenizer} tokens) "
            f"does not match the classify run {target} (", *_described(asked_tokenizer),
            "); a fine-tuned classifier reads its language model's tokens: leave ",
            Arg("tokenizer"), " and ", Arg("vocab_size"), " out."
        )
    different = {k: v for k, v in asked.items() if v is not None and v != has[k]}
    if different:
        raise ArgumentValueError(
            "train", Arg("init_from", lm.path), " is a language model with ", *_described(has),
            f"; the classify run {target} asks for ", *_described(different), ". A fine-tuned "
            "classifier has its language model's kind and sizes: leave those options out."
        )
    lm.import_user_modules()  # a user's cell: registers its name before the model is built
    return dataclasses.replace(config, **has)


def _described(options: dict) -> list:
    """The options given, as message parts separated by commas."""
    parts = []
    for key, value in options.items():
        if value is not None:
            parts += [", ", Arg(key, value)] if parts else [Arg(key, value)]
    return parts


@dataclasses.dataclass
class PreparedLabels:
    """What `Classification.prepare` returns.

    Attributes:
        train_examples, validation_examples, test_examples: ``(label, text)``
            lists (`load_labelled`).
        labels: the class names, sorted; class id i is ``labels[i]``.
        tokenizer: learned from the training texts (characters or WordPiece),
            or the language model's (``init_from``).
        source_length: the most tokens read of a text (``max_source_length``).
        class_weights: ``(classes,)`` weights of ``class_weight="balanced"``, or None.
        next_token_targets: the targets include the next tokens (``lm_weight`` > 0).
        validation_data: the validation batches, in order.
        truncated: texts per split longer than ``source_length`` tokens (read cut).
        unknown_tokens: ``[UNK]`` tokens in the training texts.
        batch_size, seed: the config's, for `epochs_data`.
    """

    train_examples: list
    validation_examples: list
    test_examples: list
    labels: list
    tokenizer: Any
    source_length: int
    class_weights: Any
    next_token_targets: bool
    validation_data: Any
    truncated: dict
    unknown_tokens: int
    batch_size: int
    seed: int

    @property
    def steps_per_epoch(self) -> int:
        """Batches in an epoch (a pass over the training texts)."""
        return -(-len(self.train_examples) // self.batch_size)

    def class_ids(self, examples) -> list[int]:
        """The class id of each ``(label, text)``."""
        index = {label: i for i, label in enumerate(self.labels)}
        return [index[label] for label, _ in examples]

    def class_counts(self, examples) -> list[int]:
        """Texts per class id among ``examples``."""
        counts = [0] * len(self.labels)
        for i in self.class_ids(examples):
            counts[i] += 1
        return counts

    def dataset(self, examples, batch_size: int | None = None, **options):
        """`keras_seq.data.make_classification_dataset` of ``examples`` with
        this run's tokenizer, lengths, targets and (by default) batch size."""
        from keras_seq import data
        from keras_seq.data.pipeline import data_sharding

        return data.make_classification_dataset(
            [t for _, t in examples], self.class_ids(examples), self.tokenizer,
            batch_size or self.batch_size, self.source_length,
            next_token_targets=self.next_token_targets, **options,
        ).with_options(data_sharding())

    def validation_batches(self, replicas: int = 1):
        """The validation batches, the first one a multiple of ``replicas`` texts.

        Keras 3.15's ``evaluate`` under a distribution strategy averages its
        first batch over the replicas (to build the model), which fails when
        they hold different numbers of rows; later batches may be uneven.
        """
        count = len(self.validation_examples)
        if count >= self.batch_size or count % replicas == 0:
            return self.dataset(self.validation_examples)
        if count < replicas:
            raise ArgumentValueError(
                "train", f"the validation split has {count} text(s), fewer than the {replicas} "
                "replicas of the strategy; give more labelled texts or fewer replicas."
            )
        return self.dataset(self.validation_examples, batch_size=count - count % replicas)

    def epochs_data(self, first_epoch: int, epochs: int, skip: int = 0):
        """The training batches of epochs ``first_epoch .. epochs - 1``, ``skip``
        batches dropped, each epoch's order drawn from the seed and its number."""
        return self.dataset(
            self.train_examples, shuffle_seed=self.seed, epochs=epochs, first_epoch=first_epoch,
            class_weights=self.class_weights,
        ).skip(skip)

