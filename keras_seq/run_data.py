"""A run's data, read and checked in Python: what ``keras-seq train`` reads first.

`load_data` reads a run's data file (or the date task, or tiny Shakespeare)
and checks it (the TSV's lines, the labels, the length of a text) before a
run folder is created; the command line calls it before it loads
TensorFlow, so that a bad file is one line in well under a second.
`keras_seq.training.prepare` turns what it returns into `tf.data`
pipelines. Imports neither Keras nor TensorFlow (`keras_seq.data`'s readers
need neither; the date task and tiny Shakespeare are plain Python).
"""

from __future__ import annotations

from keras_seq.folders import data_file
from keras_seq.run_config import TEXT_TASKS, TrainingConfig

__all__ = ["load_data", "load_labelled", "load_pairs"]


def load_pairs(config: TrainingConfig) -> tuple[list, list, list]:
    """``(train, validation, test)`` pairs: the date task, or a split of ``config.data``.

    Raises:
        FileNotFoundError: ``config.data`` does not exist.
        ValueError: naming the file: a line that is not ``source<TAB>target``,
            invalid UTF-8, or fewer than 3 pairs.
    """
    from keras_seq import data

    if config.data is None:
        task = data.date_task(
            train_size=config.train_size,
            validation_size=config.validation_size,
            test_size=config.test_size,
            seed=config.seed,
        )
        return task["train"], task["validation"], task["test"]
    path = _data_file(config)
    pairs = data.load_tsv(path)
    if len(pairs) < 3:
        raise ValueError(
            f"train: {path} holds {len(pairs)} source<TAB>target pair(s); a translation "
            "task needs at least 3 (one each for training, validation and test)."
        )
    task = data.split_pairs(
        pairs, validation_size=config.validation_size, test_size=config.test_size,
        seed=config.seed,
    )
    return task["train"], task["validation"], task["test"]


def _data_file(config: TrainingConfig, path=None, option: str = "--data") -> str:
    return data_file(config.task, config.data if path is None else path, option)


def _load_text(config: TrainingConfig) -> tuple[str, str, str]:
    """``(source, train_text, held_out_text)`` of a language-model run, checked."""
    from keras_seq import data

    source = data.tiny_shakespeare() if config.data is None else _data_file(config)
    full_text = _language_model_text(source)
    train_text, held_out_text = data.split_text(full_text)
    if len(train_text) <= config.context or len(held_out_text) < 2:
        raise ValueError(
            f"train: {source} has {len(full_text)} characters; task {config.task!r} with "
            f"context={config.context} needs more than {config.context} in its first 90% "
            "and at least 2 in its last 10%."
        )
    return source, train_text, held_out_text


def _language_model_text(source: str) -> str:
    """The text a language model reads of ``source``: a ``.tsv`` file's texts
    (``label<TAB>text`` lines, `keras_seq.data.load_labelled_tsv`), each on
    a line of its own with its label dropped, so that a classifier's labelled
    file pre-trains its language model; any other file whole."""
    from keras_seq import data

    if not source.lower().endswith(".tsv"):
        return data.load_text(source)
    return "".join(text + "\n" for _, text in data.load_labelled_tsv(source))


def load_data(config: TrainingConfig) -> tuple:
    """The data of a run, read and checked in Python only (no TensorFlow op),
    so that `train` stops on bad data before it creates anything.

    Returns:
        `load_pairs`' ``(train, validation, test)`` pairs, for
        ``task="lm"`` ``(source file, training text, held-out text)``, or for
        ``task="classify"`` `load_labelled`'s ``(train, validation, test)``.
    """
    if config.task == "classify":
        return load_labelled(config)
    return _load_text(config) if config.task in TEXT_TASKS else load_pairs(config)


def load_labelled(config: TrainingConfig) -> tuple[list, list, list]:
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

    path = _data_file(config)
    examples = data.load_labelled_tsv(path)
    labels = sorted({label for label, _ in examples})
    if len(labels) < 2:
        raise ValueError(
            f"train: {path} has {'one label, ' + repr(labels[0]) if labels else 'no texts'}; "
            "a classifier needs texts of at least two labels (label<TAB>text lines)."
        )
    split = data.split_labelled(
        examples, validation_fraction=0.1, test_fraction=0.0 if config.test_data else 0.1,
        seed=config.seed,
    )
    if config.test_data is not None:
        test_path = _data_file(config, config.test_data, "--test-data")
        split["test"] = data.load_labelled_tsv(test_path)
        unseen = sorted({label for label, _ in split["test"]} - set(labels))
        if unseen:
            raise ValueError(
                f"train: {test_path} has label(s) {', '.join(map(repr, unseen[:5]))} that no "
                f"text of {path} has; a classifier only predicts the labels it was trained on."
            )
    for part in ("validation", "test"):
        if not split[part]:
            raise ValueError(
                f"train: {path} has {len(examples)} labelled texts, too few to hold out a "
                f"{part} text at 10% of a label (a label needs at least 5 texts, or 10 in all "
                "for a validation and a test text)."
            )
    return split["train"], split["validation"], split["test"]
