"""examples/fine_tune.py: pre-training, stratified subsets, every arm, one results file.

References: the subsets' label counts and the majority baseline counted
here from the files; each arm's accuracy read back from its own run folder.
"""

import collections
import json
import os
import sys

import numpy as np
import pytest

from keras_seq import data
from keras_seq.cli import main as cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LM = ["--task", "lm", "--model", "mingru", "--units", "16", "--layers", "1", "--context", "16",
       "--batch-size", "8", "--steps-per-epoch", "3", "--epochs", "1", "--validation-size", "4",
       "--verbose", "0"]


def _reviews(count, seed):
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(count):
        label = "great" if i % 3 else "other"
        word = rng.choice(["crisp", "fresh"] if label == "great" else ["stale", "bland"])
        lines.append((label, f"The {rng.choice(['tea', 'snack'])} was {word}."))
    return lines


def _write(path, lines):
    path.write_text("".join(f"{label}\t{text}\n" for label, text in lines), encoding="utf-8")
    return str(path)


@pytest.fixture
def fine_tune(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(ROOT, "examples"))
    import fine_tune

    def run(*argv):
        monkeypatch.setattr(sys, "argv", ["fine_tune.py", *argv])
        fine_tune.main()

    return run


@pytest.mark.slow
def test_every_arm_is_scored_on_the_test_file_from_stratified_subsets(tmp_path, fine_tune):
    train = _write(tmp_path / "train.tsv", _reviews(90, seed=0))
    test = _write(tmp_path / "test.tsv", _reviews(30, seed=1))
    # The language model of the training file's texts (a .tsv: its text column).
    assert cli(["train", *_LM, "--data", train, "--out", str(tmp_path), "--name", "lm"]) == 0
    work, out = tmp_path / "work", tmp_path / "results.json"
    fine_tune("--train", train, "--test", test, "--lm", str(tmp_path / "lm"), "--sizes", "30",
              "--seeds", "2", "--arms", "tfidf", "fine_tuned", "--epochs", "1",
              "--work", str(work), "--out", str(out))
    results = json.loads(out.read_text())
    assert results["sizes"] == [30]
    test_labels = [label for label, _ in data.load_labelled_tsv(test)]
    for s, size in enumerate(results["sizes"]):
        for seed in range(2):
            subset = data.load_labelled_tsv(work / f"train-{size}-{seed}.tsv")
            counts = collections.Counter(label for label, _ in subset)
            # Two thirds `great`, as in the file: 20 and 10 of 30.
            assert counts == {"great": size * 2 // 3, "other": size // 3}
        assert results["majority"][s] == test_labels.count("great") / len(test_labels)
        for arm in ("fine_tuned",):
            accuracies = [json.loads((work / f"{arm}-{size}-{seed}" / "metrics.json").read_text())
                          ["test_accuracy"] for seed in range(2)]
            assert results["accuracy"][arm][s] == pytest.approx(np.mean(accuracies))
            assert results["std"][arm][s] == pytest.approx(np.std(accuracies))
    # The words tell the labels apart: TF-IDF finds them with 30 labels.
    assert results["accuracy"]["tfidf"] == [1.0]
    assert results["lm"]["val_loss"] == json.loads(
        (tmp_path / "lm" / "metrics.json").read_text())["val_loss"]
    # A size past the file is the whole file; TF-IDF alone needs no language model.
    fine_tune("--train", train, "--test", test, "--sizes", "500", "--seeds", "1", "--arms",
              "tfidf", "--work", str(work), "--out", str(tmp_path / "tfidf.json"))
    tfidf = json.loads((tmp_path / "tfidf.json").read_text())
    assert tfidf["sizes"] == [90] and tfidf["lm"] is None
    with pytest.raises(SystemExit) as exit_:  # the results file is never overwritten
        fine_tune("--train", train, "--test", test, "--out", str(out))
    assert exit_.value.code == 2
