"""`keras_seq.training.train`, the library function behind `keras-seq train`, at tiny sizes."""

import json

import keras
import numpy as np
import pytest

from keras_seq import training


@pytest.fixture(scope="module")
def result(tiny_date_run):
    """The tiny run (conftest); ``result.train_step_traces`` counts the traces of the train step."""
    return tiny_date_run


@pytest.mark.slow
def test_the_train_step_is_traced_once(result):
    # Keras creates the optimizer's variables inside the first trace unless
    # they exist, and TensorFlow then traces the step a second time.
    assert result.train_step_traces == 1


@pytest.mark.slow
def test_train_returns_the_metrics_it_writes_and_a_model_that_reproduces_them(result):
    with open(f"{result.run_dir}/metrics.json", encoding="utf-8") as f:
        written = json.load(f)
    assert written == result.metrics
    assert result.run_dir.endswith("dates")
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
    with pytest.raises(ValueError, match=f"train: {data} holds 2 source<TAB>target pair"):
        training.load_pairs(training.TrainingConfig(data=str(data)).resolved())


def test_family_defaults():
    assert training.default_for("epochs") == 2
    assert training.default_for("epochs", "rnn", "peephole") == 4
    assert training.default_for("units", "transformer") == 96
    resolved = training.TrainingConfig(model="transformer", epochs=np.int64(3)).resolved()
    assert (resolved.epochs, resolved.units, resolved.learning_rate) == (3, 96, 2e-3)
    assert type(resolved.epochs) is int


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_run_is_finite_and_its_saved_model_reloads(precision, tmp_path):

    result = training.train(
        out=str(tmp_path), name=precision, precision=precision, attention="none",
        train_size=64, validation_size=8, test_size=8, units=4, batch_size=32, epochs=1, verbose=0,
    )
    assert keras.config.dtype_policy().name == "float32"  # restored after the run
    model = result.model
    assert model.get_layer("decoder").dtype_policy.name == precision
    assert model.get_layer("logits").dtype_policy.name == "float32"
    metrics = result.metrics
    assert np.isfinite(metrics["loss"]) and np.isfinite(metrics["val_loss"])
    assert 0.0 <= metrics["test_exact_match"] <= 1.0
    reloaded = keras.saving.load_model(f"{result.run_dir}/model.keras", safe_mode=True)
    rng = np.random.default_rng(0)
    vocabulary = result.tokenizer.vocabulary_size
    inputs = {"encoder_inputs": rng.integers(1, vocabulary, (3, 7)).astype("int32"),
              "decoder_inputs": rng.integers(1, vocabulary, (3, 5)).astype("int32")}
    logits = model(inputs)
    assert logits.dtype == "float32" and np.isfinite(logits.numpy()).all()
    np.testing.assert_array_equal(reloaded(inputs).numpy(), logits.numpy())


def test_bad_precision_and_backup_options_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="TrainingConfig: invalid value for argument `precision`"):
        training.train(out=str(tmp_path), precision="float16")
    with pytest.raises(ValueError, match="invalid value for argument `backup_every_steps`"):
        training.train(out=str(tmp_path), backup_every_steps=0)
    with pytest.raises(TypeError, match="invalid type for argument `fresh`"):
        training.train(out=str(tmp_path), fresh=1)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_progress_off_a_terminal_is_one_line_per_epoch(tmp_path, capsys, tiny_run_options):
    # Under capsys standard output is not a terminal, as in a log file.
    options = {**tiny_run_options, "verbose": 1, "epochs": 2, "train_size": 160}
    steps = -(-160 // options["batch_size"])
    result = training.train(out=str(tmp_path), name="log", **options)
    out = capsys.readouterr().out
    assert "\x1b[" not in out and "\b" not in out  # no terminal control codes
    epochs = [line for line in out.splitlines() if line.startswith("Epoch ")]
    assert epochs == ["Epoch 1/2", "Epoch 2/2"]
    # A bar would have written up to one line per step; the log gets one per epoch.
    progress = [line for line in out.splitlines() if " - loss: " in line]
    assert len(progress) == 2 < steps
    # Last, the held-out result, as Keras' evaluate prints its scores.
    metrics = result.metrics
    assert out.splitlines()[-1] == (
        f"Held-out exact match: {metrics['test_exact_match']:.4%} ({metrics['test_correct']}/"
        f"{metrics['test_examples']}), total {metrics['seconds']['total']:.0f} s. "
        f"Run written to {result.run_dir}")


def test_a_progress_bar_is_kept_on_a_terminal(monkeypatch):
    import sys

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert training.TrainingConfig(verbose=1).fit_verbosity == 1
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    assert training.TrainingConfig(verbose=1).fit_verbosity == 2
    assert training.TrainingConfig(verbose=0).fit_verbosity == 0
