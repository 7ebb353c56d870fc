"""Sequence tagging (``--task tag``): a `keras_seq.tasks.SequenceTagger` of
``token<TAB>tag`` sentences (CoNLL style), used by ``keras-seq tag``.

Everything the command line knows of the task is here: its options and
defaults, its data reader, how a run trains, is scored and is exported, and
the ``tag`` command. The Keras parts import when they run.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from keras_seq._validation import Arg, ArgumentValueError
from keras_seq.recipes.recipe import Recipe, no_beam

__all__ = ["TAG_DEFAULTS", "Tagging", "read_tagged"]

# A bidirectional LSTM tagger over words and characters in the shape of
# Plank et al. (2016): word embeddings of 100, a character CNN of 64 filters
# of 3 and of 5 characters, two layers of 192 units per direction, dropout
# 0.33 (Dozat et al.'s). benchmarks/tagging.py measures it on UD English EWT
# (benchmarks/RESULTS.md, "Sequence tagging": 14 epochs take 8 minutes on 2
# cores; the other sizes, dropouts and vocabularies tried are there).
TAG_DEFAULTS = {"epochs": 14, "batch_size": 32, "learning_rate": 2e-3, "units": 192,
                "layers": 2}
"""The defaults of ``task="tag"``."""
_DROPOUT = 0.33
# Every training word has an embedding (lower-cased); a quarter of the
# training words are read as [UNK] (benchmarks/RESULTS.md, "Sequence
# tagging": +0.3 points over the words seen twice and a tenth dropped).
_WORD_DROPOUT = 0.25
_MIN_WORD_COUNT = 1
_LOWERCASE = True
# Held out when --data is split: validation alone with --test-data, else
# validation and test.
_VALIDATION_FRACTION = 0.05
_TEST_FRACTION = 0.1
# Batches sorted by length within windows of this many batches (then the
# batches shuffled): little padding, an order that differs every epoch.
_SORT_WINDOW = 50
_SCORE_BATCH = 256
# An integer-only file (--quantize int8) has its loops unrolled over one
# static length: this many words at most (fewer when the longest training
# sentence is shorter); a host tags a longer sentence in overlapping windows
# of this many words. It runs every position of its window whatever the
# sentence's length: on UD English EWT, windows of 16 tag the held-out
# sentences in 0.58-0.70x float's time (two runs) with 0.04 points less
# accuracy; 64 took 1.76x (benchmarks/RESULTS.md, "Integer-only models").
INTEGER_WINDOW = 16
# A line that is a token and its tag, not a comment, though it starts with #.
_TAGGED_LINE = re.compile(r"#\S*\t\S+")


class Tagging(Recipe):
    """A sequence tagger (`keras_seq.tasks.SequenceTagger`) of ``token<TAB>tag``
    lines, a blank line between sentences (`read_tagged`). ``data`` is split
    85/5/10 into training, validation and test sentences (with
    ``test_data``, 95/5 and that file's sentences to test). Scored by token
    accuracy and macro-F1 over the tags on the test sentences."""

    name = "tag"
    summary = ("a sequence tagger of --data FILE (token<TAB>tag lines, a blank line between "
               "sentences): one tag per token, from words and their characters")
    options = ("data", "test_data")
    models = ("rnn",)
    default_cell = "lstm"
    run_prefix = "tag-"
    noun = "sequence tagger"
    uses = "tag_texts"
    data = "token<TAB>tag file (a blank line between sentences)."
    formats = ("savedmodel", "tflite")
    formats_described = "'savedmodel' (tagger/1) and 'tflite' (tflite/tagger.tflite)"
    command = "tag"
    command_help = "print each token of the texts with its tag, by a trained tagger"
    command_description = (
        "Tag each TEXT (or each line of --input FILE) with the tagger in RUN_DIR (a run of "
        "keras-seq train --task tag): its whitespace-separated tokens, one line each, the "
        "token, a tab and its tag; a blank line after each text.")

    def family_defaults(self, model, cell):
        return dict(TAG_DEFAULTS)

    def resolve(self, config):
        if config.data is None:
            raise ArgumentValueError(
                "TrainingConfig", Arg("task", "tag"), " needs ", Arg("data"), ", a "
                + self.data)
        return super().resolve(config)

    # --- the data ---

    def read(self, config):
        from keras_seq.folders import data_file

        sentences = read_tagged(data_file(self.data, config.data))
        test = None
        if config.test_data is not None:
            test = read_tagged(data_file(self.data, config.test_data, "test_data"))
        return _split(sentences, test, config.seed, config.data)

    def prepare(self, config, loaded, replicas=1):
        from keras_seq.tasks.sequence_tagger import SequenceTaggerPreprocessor, tagger_vocabularies

        train, validation, test = loaded
        words, characters, tags = tagger_vocabularies(train, _MIN_WORD_COUNT, _LOWERCASE)
        preprocessor = SequenceTaggerPreprocessor(words, characters, tags, lowercase=_LOWERCASE)
        prepared = PreparedTags(train, validation, test, preprocessor, config.batch_size,
                                config.seed)
        prepared.validation_data = prepared.dataset(validation)
        return prepared

    def notes(self, prepared, config):
        tokens = sum(len(s) for s in prepared.train_sentences)
        unseen = prepared.unseen_tags()
        return [f"Sentences: {len(prepared.train_sentences)} training ({tokens} tokens), "
                f"{len(prepared.validation_sentences)} validation, "
                f"{len(prepared.test_sentences)} test; {len(prepared.tokenizer.tags)} tags, "
                f"{prepared.tokenizer.vocabulary_size} words, "
                f"{len(prepared.tokenizer.characters)} characters"] + (
            [f"Note: the held-out sentences have tag(s) {', '.join(map(repr, unseen[:5]))} that "
             "no training sentence has; the tagger never predicts them, and their tokens count "
             "as errors."] if unseen else [])

    # --- the model ---

    def build(self, config, prepared):
        from keras_seq.tasks.sequence_tagger import sequence_tagger

        preprocessor = prepared.tokenizer
        return sequence_tagger(
            preprocessor.vocabulary_size, len(preprocessor.characters), len(preprocessor.tags),
            cell=config.cell, units=config.units, num_layers=config.layers,
            word_dropout=_WORD_DROPOUT, dropout=_DROPOUT, preprocessor=preprocessor,
        )

    def compile(self, model, config, steps):
        import keras

        from keras_seq.recipes.optimization import compile_run

        compile_run(
            model, config, steps,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=-1),
            metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])

    # --- the scores ---

    def score(self, task, prepared, config, replicas):
        import numpy as np

        from keras_seq.metrics import classification_scores
        from keras_seq.run_folder import HELD_OUT_FILE

        # A held-out tag that no training sentence has is scored too: never predicted.
        tags = prepared.tokenizer.tags + prepared.unseen_tags()
        test = prepared.test_sentences
        predicted = tagged_ids(task, [[token for token, _ in s] for s in test])
        index = {tag: i for i, tag in enumerate(tags)}
        true = [np.array([index[tag] for _, tag in s], np.int64) for s in test]
        flat_true, flat_predicted = np.concatenate(true), np.concatenate(predicted)
        scores = classification_scores(flat_true, flat_predicted, len(tags))
        known = set(prepared.tokenizer.words)
        fold = str.lower if prepared.tokenizer.lowercase else str
        unknown = np.array([fold(token) not in known for s in test for token, _ in s])
        correct = flat_true == flat_predicted
        rows = [{"tokens": [t for t, _ in s], "tags": [tag for _, tag in s],
                 "predicted": [tags[i] for i in p]} for s, p in zip(test, predicted)]
        metrics = {
            "task": "tag",
            "tags": prepared.tokenizer.tags,
            "token_accuracy": scores["accuracy"],
            "macro_f1": scores["macro_f1"],
            "sentence_accuracy": float(np.mean([np.array_equal(t, p)
                                                for t, p in zip(true, predicted)])),
            "unknown_word_accuracy": float(correct[unknown].mean()) if unknown.any() else None,
            "unknown_words": int(unknown.sum()),
            "test_tokens": int(len(flat_true)),
            "test_sentences": len(test),
            "train_sentences": len(prepared.train_sentences),
            "validation_sentences": len(prepared.validation_sentences),
            "confusion_matrix": scores["confusion_matrix"],
            "per_tag": {tag: {key: scores[key][i] for key in ("precision", "recall", "f1",
                                                              "support")}
                        for i, tag in enumerate(tags)},
            "replicas": replicas,
            "examples": rows[:5],
            "errors": [row for row in rows if row["predicted"] != row["tags"]][:50],
        }
        held_out = (HELD_OUT_FILE, "\n".join("".join(f"{token}\t{tag}\n" for token, tag in s)
                                             for s in test))
        return metrics, held_out, {}, {}

    def result_line(self, metrics):
        return (f"Held-out token accuracy: {metrics['token_accuracy']:.2%} "
                f"({metrics['test_tokens']} tokens), macro-F1 {metrics['macro_f1']:.4f}")

    # --- the tag command ---

    def use(self, run_dir, texts) -> list[str]:
        """``keras-seq tag``'s lines: ``token<TAB>tag`` per token, a blank line after each text."""
        lines = []
        for pairs in self.tag_texts(run_dir, texts):
            lines += [f"{token}\t{tag}" for token, tag in pairs] + [""]
        return lines

    def tag_texts(self, run_dir, texts) -> list[list[tuple[str, str]]]:
        """`keras_seq.training.tag_texts`: each text's ``(token, tag)`` pairs."""
        from keras_seq._backend import START_UNDER_TENSORFLOW, require_tensorflow
        from keras_seq._validation import invalid_type
        from keras_seq.recipes import read_run
        from keras_seq.tasks import from_run

        require_tensorflow("keras_seq.training.tag_texts", START_UNDER_TENSORFLOW)
        if isinstance(texts, (str, bytes)) or not all(isinstance(t, str) for t in texts):
            raise invalid_type(self.uses, "texts", "a sequence of str", texts)
        run = read_run(run_dir, self.uses, task=self.name)
        return from_run(run).tag(list(texts)) if texts else []

    # --- the exports ---

    def export(self, run, out, formats, beam_width, quantize, examples, progress,
               calibration=None):
        import numpy as np
        import tensorflow as tf

        from keras_seq.export._artifacts import REFERENCE_FILE, artifact_entry, host_folder
        from keras_seq.export.integer_tflite import is_integer
        from keras_seq.export.saved_model import export_strings_saved_model
        from keras_seq.export.tflite_export import convert_to_tflite

        no_beam(beam_width, "a tagger decodes nothing")
        formats = formats or self.formats
        from keras_seq.tasks import from_run

        tagger = from_run(run)
        preprocessor = tagger.preprocessor
        probabilities = probability_model(tagger)
        written, artifacts = {}, []
        if "savedmodel" in formats:
            tags = tf.constant(preprocessor.tags, tf.string)

            def serve(inputs):
                tokens = preprocessor.split(inputs)
                word_ids, char_ids = preprocessor.token_ids(tokens)
                p = probabilities({"word_ids": word_ids, "char_ids": char_ids})
                real = tf.not_equal(word_ids, 0)
                return {"tags": tf.where(real, tf.gather(tags, tf.argmax(p, axis=-1)), ""),
                        "tokens": tokens.to_tensor(""), "probabilities": p}

            with progress.artifact("tagger/1 (SavedModel)"):
                written["savedmodel"] = export_strings_saved_model(
                    tagger, serve, os.path.join(out, "tagger", "1"), "tagger",
                    resources=preprocessor.lookup_tables())
            artifacts.append(artifact_entry(out, written["savedmodel"], "savedmodel", None,
                                            task="tag"))
        host = {"task": "tag", "pad_id": 0, "unk_id": 1, "lowercase": preprocessor.lowercase,
                "word_length": preprocessor.word_length, "tags": preprocessor.tags}
        for mode in [None, *quantize] if "tflite" in formats else list(quantize):
            name = "tflite" if mode is None else f"tflite_{mode}"
            window, data = (_calibration_ids(calibration, preprocessor) if is_integer(mode)
                            else (None, None))
            folder = host_folder(out, name, preprocessor, {
                **host, "quantize": mode, **({"window": window} if window else {})})
            path = os.path.join(folder, "tagger.tflite")
            with progress.artifact(f"{name}/tagger.tflite"), open(path, "wb") as f:
                f.write(convert_to_tflite(probabilities, quantize=mode,
                                          representative_data=data))
            written[name] = path
            artifacts.append(artifact_entry(out, folder, "tflite", mode, task="tag"))
        test = read_tagged(os.path.join(run.path, "test.tsv"))[:examples]
        if test:
            with progress.artifact("reference.npz (Keras' tags)"):
                texts = [" ".join(token for token, _ in s) for s in test]
                word_ids, char_ids = preprocessor.token_ids([[t for t, _ in s] for s in test])
                keras_p = np.asarray(probabilities({"word_ids": word_ids, "char_ids": char_ids},
                                                   training=False), np.float32)
                lengths = [len(s) for s in test]
                keras_tags = [" ".join(preprocessor.tags[i] for i in p[:n].argmax(-1))
                              for p, n in zip(keras_p, lengths)]
                written["reference"] = os.path.join(out, REFERENCE_FILE)
                np.savez(written["reference"], texts=np.array(texts, dtype=str),
                         targets=np.array([" ".join(t for _, t in s) for s in test], dtype=str),
                         word_ids=word_ids.numpy(), char_ids=char_ids.numpy(),
                         keras_probabilities=keras_p, keras_tags=np.array(keras_tags, dtype=str))
        manifest = {"task": "tag", "check": "tags",
                    "run_dir": os.path.basename(os.path.normpath(run.path)),
                    "reference": REFERENCE_FILE if test else None, "artifacts": artifacts,
                    "tags": preprocessor.tags}
        return written, manifest


def _calibration_ids(calibration, preprocessor) -> tuple[int, list[dict]]:
    """The integer file's window (words) and its calibration examples:
    training sentences, one per example, padded (or cut) to the window."""
    import numpy as np

    from keras_seq.export.calibration import rows

    training = calibration.training()
    window = min(INTEGER_WINDOW, max(len(s) for s in training))
    sentences = [[token for token, _ in s][:window] for s in training[: calibration.count]]
    word_ids, char_ids = (np.asarray(ids) for ids in preprocessor.token_ids(sentences))
    room = window - word_ids.shape[1]
    word_ids = np.pad(word_ids, [(0, 0), (0, room)])
    char_ids = np.pad(char_ids, [(0, 0), (0, room), (0, 0)])
    return window, [{"word_ids": w, "char_ids": c}
                    for w, c in zip(rows(word_ids), rows(char_ids))]


def probability_model(tagger):
    """The Keras model ``{word_ids, char_ids} -> softmax(tagger(...))`` (float32),
    sharing the tagger's layers: what a device runs."""
    import keras

    softmax = keras.layers.Activation("softmax", dtype="float32", name="probabilities")
    return keras.Model(tagger.inputs, softmax(tagger.outputs[0]), name="tagger")


def tagged_ids(tagger, sentences, batch_size: int = _SCORE_BATCH) -> list:
    """The most probable tag id of each token of each sentence (lists of tokens)."""
    import numpy as np

    order = np.argsort([len(s) for s in sentences], kind="stable")  # little padding
    out = [None] * len(sentences)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        word_ids, char_ids = tagger.preprocessor.token_ids([sentences[i] for i in rows])
        p = tagger.tag_probabilities(word_ids, char_ids).numpy()
        for j, i in enumerate(rows):
            out[i] = p[j, : len(sentences[i])].argmax(-1)
    return out


def read_tagged(path) -> list[list[tuple[str, str]]]:
    """The sentences of a ``token<TAB>tag`` file: lists of ``(token, tag)``.

    One token per line, its tag after a tab; a blank line ends a sentence;
    a line starting with ``#`` is a comment (as in CoNLL-U) unless it is a
    token and a tag, neither with a space, around one tab (``#<TAB>SYM``,
    ``#1<TAB>NOUN``: the token ``#`` is common in web text). Plain Python:
    the command line reads the file before it loads TensorFlow.

    Raises:
        ValueError: naming the file and the line: a line that is not
            ``token<TAB>tag`` (one tab, neither side empty), or no sentence.
    """
    sentences, sentence = [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if line.startswith("#") and not _TAGGED_LINE.fullmatch(line):
                continue  # a comment; "#<TAB>SYM" is a token
            if not line.strip():
                if sentence:
                    sentences.append(sentence)
                    sentence = []
                continue
            parts = line.split("\t")
            if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
                raise ArgumentValueError(
                    "train", f"{path}, line {number}: expected token<TAB>tag (one tab; a blank "
                    f"line between sentences), received {line[:80]!r}.")
            sentence.append((parts[0], parts[1]))
    if sentence:
        sentences.append(sentence)
    if not sentences:
        raise ArgumentValueError("train", f"{path} has no tagged sentence (token<TAB>tag lines).")
    return sentences


def _split(sentences, test, seed: int, path):
    """``(train, validation, test)`` sentences: ``sentences`` shuffled by ``seed``
    and split 85/5/10 (95/5 with ``test``, the test sentences given)."""
    import random

    order = list(range(len(sentences)))
    random.Random(seed).shuffle(order)
    held = [_VALIDATION_FRACTION] + ([] if test is not None else [_TEST_FRACTION])
    counts = [max(1, round(len(sentences) * fraction)) for fraction in held]
    if sum(counts) >= len(sentences):
        raise ArgumentValueError(
            "train", f"{path} has {len(sentences)} sentences, too few to hold out "
            f"{' and '.join(['validation', 'test'][: len(counts)])} sentences and train on "
            "the rest.")
    validation = [sentences[i] for i in order[: counts[0]]]
    if test is None:
        test = [sentences[i] for i in order[counts[0] : counts[0] + counts[1]]]
    train = [sentences[i] for i in order[sum(counts):]]
    return train, validation, test


@dataclasses.dataclass
class PreparedTags:
    """What `Tagging.prepare` returns.

    Attributes:
        train_sentences, validation_sentences, test_sentences: lists of
            ``(token, tag)`` lists.
        tokenizer: the `keras_seq.tasks.SequenceTaggerPreprocessor` learned
            from the training sentences (the run folder's vocabularies).
        batch_size, seed: the config's.
        validation_data: the validation batches.
    """

    train_sentences: list
    validation_sentences: list
    test_sentences: list
    tokenizer: Any
    batch_size: int
    seed: int
    validation_data: Any = None

    def unseen_tags(self) -> list[str]:
        """The tags of the held-out sentences that no training sentence has, sorted."""
        held_out = {tag for s in self.validation_sentences + self.test_sentences for _, tag in s}
        return sorted(held_out - set(self.tokenizer.tags))

    @property
    def steps_per_epoch(self) -> int:
        """Batches in an epoch (a pass over the training sentences)."""
        return -(-len(self.train_sentences) // self.batch_size)

    def _arrays(self, sentences):
        """The sentences' word ids ``(N,)`` and character ids ``(N, C)`` of all
        their tokens, each sentence's first token and its length, and the tag
        ids ``(N,)`` (NumPy)."""
        import numpy as np

        word_ids, char_ids = self.tokenizer.token_ids([[t for t, _ in s] for s in sentences],
                                                      ragged=True)
        index = {tag: i for i, tag in enumerate(self.tokenizer.tags)}
        tag_ids = np.array([index.get(tag, -1) for s in sentences for _, tag in s], np.int32)
        return (word_ids.flat_values.numpy(), char_ids.flat_values.numpy(),
                word_ids.row_starts().numpy(), word_ids.row_lengths().numpy(), tag_ids)

    def _batches(self, arrays, batches):
        """The padded batches of the given rows: ``({"word_ids", "char_ids"}, tag_ids)``
        (tag -1 at padding)."""
        import numpy as np

        word_ids, char_ids, starts, lengths, tag_ids = arrays
        for rows in batches:
            n = int(lengths[rows].max())
            words = np.zeros((len(rows), n), np.int32)
            chars = np.zeros((len(rows), n, char_ids.shape[-1]), np.int32)
            tags = np.full((len(rows), n), -1, np.int32)
            for j, i in enumerate(rows):
                span = slice(starts[i], starts[i] + lengths[i])
                words[j, : lengths[i]] = word_ids[span]
                chars[j, : lengths[i]] = char_ids[span]
                tags[j, : lengths[i]] = tag_ids[span]
            yield {"word_ids": words, "char_ids": chars}, tags

    def _from_batches(self, arrays, batches):
        import tensorflow as tf

        from keras_seq.data.pipeline import data_sharding

        width = arrays[1].shape[-1]
        signature = ({"word_ids": tf.TensorSpec([None, None], tf.int32),
                      "char_ids": tf.TensorSpec([None, None, width], tf.int32)},
                     tf.TensorSpec([None, None], tf.int32))
        return tf.data.Dataset.from_generator(
            lambda: self._batches(arrays, batches), output_signature=signature,
        ).apply(tf.data.experimental.assert_cardinality(len(batches))).prefetch(2).with_options(
            data_sharding())

    def dataset(self, sentences):
        """The batches of ``sentences`` in order of length (validation)."""
        import numpy as np

        arrays = self._arrays(sentences)
        order = np.argsort(arrays[3], kind="stable")  # the lengths
        batches = [order[i : i + self.batch_size] for i in range(0, len(order),
                                                                 self.batch_size)]
        return self._from_batches(arrays, batches)

    def epochs_data(self, first_epoch: int, epochs: int, skip: int = 0):
        """The training batches of epochs ``first_epoch .. epochs - 1``, ``skip``
        batches dropped: each epoch's order drawn from the seed and its number,
        sorted by length within windows of `_SORT_WINDOW` batches, the batches
        then shuffled."""
        import numpy as np

        arrays = self._arrays(self.train_sentences)
        lengths, size = arrays[3], self.batch_size
        batches = []
        for epoch in range(first_epoch, epochs):
            rng = np.random.default_rng([self.seed, epoch])
            order = rng.permutation(len(lengths))
            window = size * _SORT_WINDOW
            epoch_batches = []
            for start in range(0, len(order), window):
                part = order[start : start + window]
                part = part[np.argsort(lengths[part], kind="stable")]
                epoch_batches += [part[i : i + size] for i in range(0, len(part), size)]
            batches += [epoch_batches[i] for i in rng.permutation(len(epoch_batches))]
        return self._from_batches(arrays, batches[skip:])
