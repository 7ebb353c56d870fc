"""``keras-seq train --task classify``: labelled texts, from scratch or fine-tuned
from a ``--task lm`` run, then ``classify``, ``export`` and ``verify``.

References: scikit-learn's metrics and class weights, NumPy cross-entropies,
and the saved model run on each text alone (ids from the vocabulary file).
"""

import collections
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_seq.models  # noqa: F401  (registers the layers for loading)
from keras_seq import data, recipes, text, training
from keras_seq.cli import main

LABELS = {"apple": "a", "banana": "b", "cherry": "c"}
# 2 epochs of a bidirectional GRU of 8 units; the fine-tuned runs train 2 epochs too.
_SCRATCH = ["--units", "8", "--epochs", "2", "--batch-size", "16", "--verbose", "0"]
_FINE_TUNE = ["--epochs", "2", "--batch-size", "16", "--class-weight", "balanced",
              "--lm-weight", "0.5", "--verbose", "0"]
_LM = ["--task", "lm", "--units", "16", "--layers", "1", "--context", "16", "--batch-size", "8",
       "--steps-per-epoch", "3", "--epochs", "1", "--validation-size", "4", "--verbose", "0"]


def _labelled(count=90, seed=0):
    """Texts whose label is the letter they repeat most; apple twice as often."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(count):
        label = "apple" if i % 2 else str(rng.choice(list(LABELS)))
        letters = [LABELS[label]] * 2 + ["x", "y", " "]
        lines.append((label, "".join(rng.choice(letters, size=rng.integers(4, 24)))))
    return lines


def _write(path, lines):
    path.write_text("".join(f"{label}\t{t}\n" for label, t in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A labelled TSV, a tiny language model of the same texts, a classifier
    trained from scratch and one fine-tuned from the language model."""
    root = tmp_path_factory.mktemp("classify")
    tsv = _write(root / "labelled.tsv", _labelled())
    corpus = root / "text.txt"
    corpus.write_text("".join(f"{label}: {t}\n" for label, t in _labelled(200, seed=1)))
    out = str(root)
    assert main(["train", *_LM, "--data", str(corpus), "--out", out, "--name", "lm"]) == 0
    assert main(["train", "--task", "classify", "--data", str(tsv), *_SCRATCH,
                 "--class-weight", "balanced", "--out", out, "--name", "scratch"]) == 0
    assert main(["train", "--task", "classify", "--data", str(tsv), "--init-from",
                 str(root / "lm"), *_FINE_TUNE, "--out", out, "--name", "fine_tuned"]) == 0
    # A block language model's body from random weights, the mean of its
    # states read: the fine-tuned classifier's form, trained from scratch.
    assert main(["train", "--task", "classify", "--model", "mingru", "--layers", "1",
                 "--pooling", "mean", "--data", str(tsv), *_SCRATCH, "--class-weight",
                 "balanced", "--out", out, "--name", "scratch_mingru"]) == 0
    return root


def _ids(run_dir, texts):
    """Each text's ids from the run's vocabulary file, unpadded: the reference tokenizer."""
    vocabulary = text.load_tokenizer(run_dir).vocabulary
    return [np.array([[vocabulary.index(c) if c in vocabulary else text.UNK_ID for c in t]],
                     "int32") for t in texts]


def _probabilities(run_dir, texts):
    """The saved model's softmax on each text alone, in float64."""
    model = keras.saving.load_model(run_dir / "model.keras", safe_mode=True)
    logits = np.concatenate([np.asarray(model(ids), np.float64) for ids in _ids(run_dir, texts)])
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


# ---------------------------------------------------------------------------
# Data


def test_a_labelled_line_is_a_label_a_tab_and_the_rest_of_the_line(tmp_path):
    path = tmp_path / "l.tsv"
    path.write_bytes("\ufeffpos \tGood.\tVery.\r\n\n neg\t Bad \n".encode())
    assert data.load_labelled_tsv(path) == [("pos", "Good.\tVery."), ("neg", " Bad ")]


def test_the_split_is_stratified_seeded_and_keeps_a_training_text_of_each_label():
    examples = [(label, f"{label}{i}") for label, n in (("a", 47), ("b", 21), ("c", 2), ("d", 1))
                for i in range(n)]
    split = data.split_labelled(examples, seed=3)
    assert split == data.split_labelled(examples, seed=3)
    assert split != data.split_labelled(examples, seed=4)
    assert sorted(sum(split.values(), [])) == sorted(examples)
    counts = {part: collections.Counter(label for label, _ in split[part]) for part in split}
    for part in ("validation", "test"):
        assert sum(counts[part].values()) == round(0.1 * len(examples))  # 7 of 71
        # Each label holds out its share of 10%, rounded down or up.
        for label, n in (("a", 47), ("b", 21)):
            assert counts[part][label] in (int(0.1 * n), int(0.1 * n) + 1)
    assert all(counts["train"][label] >= 1 for label in "abcd")
    held = data.split_labelled(examples, validation_fraction=0.1, test_fraction=0.0)
    assert held["test"] == [] and len(held["validation"]) == 7


@pytest.mark.parametrize("lines, expected", [
    ("a\tone\n\tno label\n", "line 2: empty label in '\\tno label' (expected label<TAB>text)"),
    ("a\tone\nb two\n", "line 2: expected label<TAB>text, found no tab in 'b two'"),
    ("a\tone\na\ttwo\n", "has one label, 'a'; a classifier needs texts of at least two labels"),
    ("a\tone\nb\t \n", "line 2: empty text"),
])
def test_bad_labelled_data_is_one_line_before_anything_is_written(tmp_path, capsys, lines,
                                                                  expected):
    path = tmp_path / "bad.tsv"
    path.write_text(lines, encoding="utf-8")
    out = tmp_path / "runs"
    assert main(["train", "--task", "classify", "--data", str(path), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("keras-seq train: ") and err.count("\n") == 1 and expected in err, err
    assert not out.exists()


def test_a_test_label_that_no_training_text_has_is_an_error(tmp_path, capsys):
    train, test = tmp_path / "train.tsv", tmp_path / "test.tsv"
    _write(train, _labelled(40))
    _write(test, [("apple", "aaa"), ("durian", "ddd")])
    out = tmp_path / "runs"
    assert main(["train", "--task", "classify", "--data", str(train), "--test-data", str(test),
                 "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "label(s) 'durian' that no text of" in err and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize("argv, expected", [
    (["--lm-weight", "0.5"], "--lm-weight 0.5 is an option of fine-tuning a language model: "
     "it needs --init-from."),
    (["--freeze-body"], "--freeze-body is an option of fine-tuning a language model: it needs "
     "--init-from."),
    (["--init-from", "lm", "--freeze-body", "--lm-weight", "0.5"], "--lm-weight 0.5 needs to "
     "be 0 with --freeze-body"),
    (["--validation-size", "5"], "--validation-size 5 is an option of --task dates, --task "
     "translate, --task lm or --task bilm; received --task classify."),
    (["--attention", "luong"], "--attention luong is an option of --task dates or --task "
     "translate; received --task classify."),
    (["--pooling", "mean"], "--pooling mean is an option of a classifier that reads a language "
     "model's body (--init-from, or --model mingru|minlstm|rglru|xlstm)"),
])
def test_contradicting_classify_options_are_argument_errors(capsys, argv, expected):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--task", "classify", "--data", "x.tsv", *argv])
    assert exit_.value.code == 2 and expected in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--task", "translate", "--data", "x.tsv", "--class-weight", "balanced"])
    assert ("--class-weight balanced is an option of --task classify; received --task translate."
            in capsys.readouterr().err)


# ---------------------------------------------------------------------------
# From scratch: the run folder, classify


@pytest.mark.slow
@pytest.mark.parametrize("name", ["scratch", "scratch_mingru"])
def test_metrics_are_the_saved_models_scores_on_the_test_texts(runs, name):
    from sklearn.metrics import accuracy_score, confusion_matrix, f1_score
    from sklearn.utils.class_weight import compute_class_weight

    run_dir = runs / name
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["task"] == "classify" and metrics["labels"] == sorted(LABELS)
    test = data.load_labelled_tsv(run_dir / "test.tsv")
    truth = [metrics["labels"].index(label) for label, _ in test]
    predicted = _probabilities(run_dir, [t for _, t in test]).argmax(axis=-1)
    assert metrics["test_accuracy"] == pytest.approx(accuracy_score(truth, predicted))
    assert metrics["test_macro_f1"] == pytest.approx(
        f1_score(truth, predicted, average="macro", zero_division=0))
    assert metrics["confusion_matrix"] == confusion_matrix(truth, predicted,
                                                           labels=[0, 1, 2]).tolist()
    # Per-class counts: the test file's, and the three splits add up to the data file's.
    everything = collections.Counter(label for label, _ in _labelled())
    counts = metrics["class_counts"]
    assert counts["test"] == dict(collections.Counter(label for label, _ in test))
    assert {label: sum(counts[p][label] for p in counts) for label in LABELS} == everything
    train_labels = [label for label in LABELS for _ in range(counts["train"][label])]
    expected = compute_class_weight("balanced", classes=np.array(sorted(LABELS)),
                                    y=np.array(train_labels))
    np.testing.assert_allclose(list(metrics["class_weights"].values()), expected, rtol=1e-6)
    assert metrics["imbalance"] == max(counts["train"].values()) / min(counts["train"].values())
    with open(run_dir / "confusion.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_classify_prints_each_texts_label_and_probability(runs, capsys, tmp_path):
    run_dir = runs / "scratch"
    texts = ["aaxa", "b by bb", "c\tc"]
    capsys.readouterr()
    assert main(["classify", str(run_dir), *texts]) == 0
    printed = capsys.readouterr().out.splitlines()
    probabilities = _probabilities(run_dir, texts)
    labels = sorted(LABELS)
    assert printed == [f"{labels[p.argmax()]}\t{p.max():.4f}" for p in probabilities]
    inputs = tmp_path / "texts.txt"
    inputs.write_text("\n".join(texts) + "\n", encoding="utf-8")
    assert main(["classify", str(run_dir), "--input", str(inputs)]) == 0
    assert capsys.readouterr().out.splitlines() == printed
    assert main(["classify", str(run_dir), "aaa", "#"]) == 0
    assert "input 2 '#' has characters outside the run's vocabulary" in capsys.readouterr().err
    assert main(["translate", str(run_dir), "aaa"]) == 1
    assert "holds a text classifier" in capsys.readouterr().err
    assert main(["classify", str(runs / "lm"), "aaa"]) == 1
    assert ("holds a language model (--task lm), not a text classifier; use keras-seq generate"
            in capsys.readouterr().err)


# ---------------------------------------------------------------------------
# Fine-tuning


@pytest.mark.slow
def test_fine_tuning_starts_from_the_lm_and_minimises_task_plus_lambda_lm_loss(runs):
    config = training.TrainingConfig(
        task="classify", data=str(runs / "labelled.tsv"), init_from=str(runs / "lm"),
        class_weight="balanced", lm_weight=0.3, batch_size=16, out=str(runs),
    ).resolved()
    config = training.with_language_model(config)
    assert (config.model, config.units, config.layers) == ("transformer", 16, 1)
    prepared = training.prepare_data(config)
    recipe = recipes.get("classify")
    model = recipe.trainer(recipe.build(config, prepared), config, prepared)
    recipe.compile(model, config, steps=10)
    lm = keras.saving.load_model(runs / "lm" / "model.keras", safe_mode=True)
    for name in ("token_embedding", "decoder_layer_0"):
        for a, b in zip(lm.get_layer(name).get_weights(),
                        model.backbone.get_layer(name).get_weights()):
            np.testing.assert_array_equal(a, b)

    ids, targets, weights = next(iter(prepared.epochs_data(0, 1)))
    outputs = model(ids, training=False)
    labels, following = targets["classes"].numpy(), targets["next_tokens"].numpy()
    np.testing.assert_array_equal(following[:, :-1], np.where(ids[:, 1:] != 0, ids[:, 1:], 0))

    def cross_entropy(logits, y):
        logits = np.asarray(logits, np.float64)
        shifted = logits - logits.max(axis=-1, keepdims=True)
        log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        return -np.take_along_axis(log_p, y[..., None], axis=-1)[..., 0]

    class_weight = prepared.class_weights[labels]
    np.testing.assert_allclose(weights["classes"], class_weight)
    task = np.mean(class_weight * cross_entropy(outputs["classes"], labels))
    lm_loss = cross_entropy(outputs["next_tokens"], following)[following != 0].mean()
    loss = model.test_on_batch(ids, targets, weights, return_dict=True)["loss"]
    assert loss == pytest.approx(task + 0.3 * lm_loss, rel=1e-5)


@pytest.mark.slow
def test_a_mismatched_language_model_is_a_one_line_error_naming_both_runs(runs, capsys):
    base = ["train", "--task", "classify", "--data", str(runs / "labelled.tsv"),
            "--out", str(runs), "--name", "bad"]
    lm = str(runs / "lm")
    for argv, expected in (
        (["--init-from", lm, "--model", "rnn"], f"--init-from {lm} is a language model with "
         "--model transformer, --units 16, --layers 1; the classify run "
         f"{runs / 'bad'} asks for --model rnn"),
        (["--init-from", lm, "--tokenizer", "wordpiece"], f"the vocabulary of --init-from {lm} "
         "(char tokens) does not match the classify run"),
        (["--init-from", str(runs / "scratch")], "is a 'classify' run, not a language model"),
    ):
        assert main(base + argv) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and expected in err, err
    assert not (runs / "bad").exists()


@pytest.mark.slow
def test_a_crashed_fine_tuning_run_resumes_to_the_uninterrupted_weights(runs, interrupted_run):
    reference = keras.saving.load_model(runs / "fine_tuned" / "model.keras", safe_mode=True)
    options = dict(task="classify", data=str(runs / "labelled.tsv"), init_from=str(runs / "lm"),
                   epochs=2, batch_size=16, class_weight="balanced", lm_weight=0.5, verbose=0,
                   out=str(runs), name="crash")
    interrupted_run(**options)
    result = training.train(**options)
    assert result.metrics["resumed_from_epoch"] == 2
    saved = keras.saving.load_model(runs / "crash" / "model.keras", safe_mode=True)
    assert len(saved.get_weights()) == len(reference.get_weights())
    for a, b in zip(reference.get_weights(), saved.get_weights()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fine_tuned", "scratch_mingru"])
def test_a_language_model_classifier_exports_and_verifies_against_keras(runs, tmp_path, capsys,
                                                                         name):
    from keras_seq.export import tflite_op_names

    run_dir, out = runs / name, tmp_path / "export"
    assert main(["export", str(run_dir), str(out), "--formats", "savedmodel", "tflite", "onnx",
                 "--quantize", "dynamic"]) == 0
    texts = [t for _, t in data.load_labelled_tsv(run_dir / "test.tsv")]
    served = tf.saved_model.load(str(out / "classifier" / "1")).signatures["serving_default"](
        inputs=tf.constant(texts))
    probabilities = _probabilities(run_dir, texts)
    labels = sorted(LABELS)
    np.testing.assert_allclose(served["probabilities"].numpy(), probabilities, atol=1e-5)
    assert [s.decode() for s in served["labels"].numpy()] == [labels[i] for i in
                                                             probabilities.argmax(-1)]
    ops = tflite_op_names((out / "tflite" / "classifier.tflite").read_bytes())
    assert not [op for op in ops if op.startswith("CUSTOM")]
    host = json.loads((out / "tflite" / "export.json").read_text())
    assert host["labels"] == labels and host["source_length"] == 256
    capsys.readouterr()
    assert main(["verify", str(out), "--json", str(tmp_path / "verify.json")]) == 0
    rows = json.loads((tmp_path / "verify.json").read_text())["artifacts"]
    assert {row["artifact"] for row in rows} == {"classifier/1", "tflite", "tflite_dynamic", "onnx"}
    for row in rows:
        assert row["task"] == "classify" and row["string_match"] >= 0.995
        if row["quantize"] is None:
            assert row["string_match"] == 1.0 and row["max_abs_probability_error"] < 1e-4
        assert row["exact_match"] == pytest.approx(
            json.loads((run_dir / "metrics.json").read_text())["test_accuracy"])
    assert "same label as Keras" in capsys.readouterr().out


@pytest.mark.slow
def test_a_wordpiece_classifier_trains_in_mixed_precision(runs, capsys):
    assert main(["train", "--task", "classify", "--data", str(runs / "labelled.tsv"),
                 "--tokenizer", "wordpiece", "--vocab-size", "40", "--model", "transformer",
                 "--units", "8", "--layers", "1", "--epochs", "1", "--precision",
                 "mixed_bfloat16", "--out", str(runs), "--name", "wordpiece",
                 "--verbose", "0"]) == 0
    run_dir = runs / "wordpiece"
    assert json.loads((run_dir / "tokenizer.json").read_text())["type"] == "wordpiece"
    model = keras.saving.load_model(run_dir / "model.keras", safe_mode=True)
    assert model.backbone.get_layer("encoder_layer_0").dtype_policy.name == "mixed_bfloat16"
    assert model.output_layer.dtype_policy.name == "float32"
    capsys.readouterr()
    assert main(["classify", str(run_dir), "aaa bbb"]) == 0
    label, probability = capsys.readouterr().out.split("\t")
    assert label in LABELS and 0 < float(probability) <= 1


@pytest.mark.slow
def test_fine_tuning_under_mirrored_strategy_with_two_cpu_replicas(runs, tmp_path):
    script = (
        "import tensorflow as tf\n"
        "cpu = tf.config.list_physical_devices('CPU')[0]\n"
        "tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)\n"
        "from keras_seq.cli import main\n"
        f"raise SystemExit(main(['train', '--task', 'classify', '--data', "
        f"{str(runs / 'labelled.tsv')!r}, '--init-from', {str(runs / 'lm')!r}, "
        f"*{_FINE_TUNE!r}, '--distribute', 'mirrored', '--out', {str(tmp_path)!r}, "
        "'--name', 'm']))\n"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=600)
    metrics = json.loads((tmp_path / "m" / "metrics.json").read_text())
    reference = json.loads((runs / "fine_tuned" / "metrics.json").read_text())
    assert metrics["replicas"] == 2 and metrics["strategy"] == "mirrored"
    assert metrics["test_examples"] == reference["test_examples"]
    # Started from the language model (each replica draws its own dropout
    # masks, so the weights are not one device's): an Adam step of rate 5e-4
    # moves a weight by at most 5e-4 (1 - 0.9) / sqrt(1 - 0.999) < 5e-4 * 3.2.
    mirrored = keras.saving.load_model(tmp_path / "m" / "model.keras", safe_mode=True)
    lm = keras.saving.load_model(runs / "lm" / "model.keras", safe_mode=True)
    for name in ("token_embedding", "decoder_layer_0"):
        moved = [np.abs(a - b).max() for a, b in zip(lm.get_layer(name).get_weights(),
                                                      mirrored.backbone.get_layer(name)
                                                      .get_weights())]
        assert 0 < max(moved) <= 10 * 5e-4 * 3.2, (name, moved)
