"""`keras_seq.training.train`, the library function behind `keras-seq train`, at tiny sizes."""

import json

import numpy as np
import pytest

from keras_seq import training

_TINY = dict(train_size=300, validation_size=30, test_size=40, units=16, batch_size=32,
             epochs=1, verbose=0)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    return training.train(training.TrainingConfig(out=str(out), name="lib", **_TINY))


@pytest.mark.slow
def test_train_returns_the_metrics_it_writes_and_a_model_that_reproduces_them(result):
    with open(f"{result.run_dir}/metrics.json", encoding="utf-8") as f:
        written = json.load(f)
    assert written == result.metrics
    assert result.run_dir.endswith("lib")
    metrics = result.metrics
    assert metrics["test_examples"] == 40 and metrics["train_examples"] == 300
    assert metrics["test_exact_match"] == metrics["test_correct"] / 40
    # The family defaults are filled in; explicit options are kept.
    config = metrics["config"]
    assert config["learning_rate"] == training.default_for("learning_rate") == 3e-3
    assert (config["epochs"], config["units"], config["batch_size"]) == (1, 16, 32)
    assert config["parameters"] == result.model.count_params()
    assert config["vocabulary_size"] == result.tokenizer.vocabulary_size
    # The returned model and tokenizer decode the test examples as evaluated,
    # and so does the saved run folder.
    sources = [e["source"] for e in metrics["examples"]]
    decode = training.make_decoder(result.model, config["source_length"], config["target_length"])
    outputs = training.translate_strings(decode, result.tokenizer, sources, config["source_length"])
    assert outputs == [e["output"] for e in metrics["examples"]]
    assert training.translate_texts(result.run_dir, sources) == outputs
    with open(f"{result.run_dir}/attention.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_bad_options_are_rejected_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="TrainingConfig: invalid value for argument `epochs`"):
        training.train(out=str(tmp_path), epochs=0)
    with pytest.raises(ValueError, match="TrainingConfig: invalid value for argument `cell`"):
        training.train(training.TrainingConfig(cell="rnn", out=str(tmp_path)))
    with pytest.raises(TypeError, match="TrainingConfig: invalid type for argument `units`"):
        training.train(out=str(tmp_path), units=True)
    assert list(tmp_path.iterdir()) == []  # no run folder was created


def test_tsv_split_needs_three_pairs(tmp_path):
    data = tmp_path / "two.tsv"
    data.write_text("a\tb\nc\td\n")
    with pytest.raises(ValueError, match="split_pairs: invalid value for argument `pairs`"):
        training.load_pairs(training.TrainingConfig(data=str(data)).resolved())


def test_family_defaults():
    assert training.default_for("epochs") == 2
    assert training.default_for("epochs", "rnn", "peephole") == 4
    assert training.default_for("units", "transformer") == 96
    resolved = training.TrainingConfig(model="transformer", epochs=np.int64(3)).resolved()
    assert (resolved.epochs, resolved.units, resolved.learning_rate) == (3, 96, 2e-3)
    assert type(resolved.epochs) is int
