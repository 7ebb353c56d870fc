"""Character language models: the data, cached sampling, and `train --task lm` -> `generate`.

Sampling is checked against the plain model run on each prefix; the held-out
loss of a run against a NumPy recomputation with its saved model.
"""

import hashlib
import json
import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_seq.models  # noqa: F401  (registers the layers for loading)
from keras_seq import data, decoding, models, text, training
from keras_seq._unused_imports import python_command
from keras_seq.cli import main
from keras_seq.model_kinds import LANGUAGE_MODEL_KINDS

_TEXT = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n"
) * 3
# 2 epochs of 3 batches; one LSTM layer of 16 units.
_TINY = ["--task", "lm", "--model", "rnn", "--units", "16", "--layers", "1", "--context", "8",
         "--batch-size", "4", "--steps-per-epoch", "3", "--epochs", "2",
         "--validation-size", "4", "--verbose", "0"]


def _log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


# ---------------------------------------------------------------------------
# Data


def test_the_held_out_text_is_the_last_tenth():
    text = "".join(chr(65 + i % 26) for i in range(1234))
    train, held_out = data.split_text(text)
    assert train + held_out == text
    assert len(train) == int(1234 * 0.9) == 1110


def test_an_lm_of_a_tsv_reads_its_text_column_one_text_a_line(tmp_path):
    from keras_seq.recipes import load_data

    reviews = [("great", "Crisp and fresh.<br />Buy it."), ("other", "Stale\tand dull."),
               ("great", "My dog loves these treats, " * 3)]
    tsv = tmp_path / "reviews.tsv"
    tsv.write_text("".join(f"{label}\t{review}\n\n" for label, review in reviews))
    config = training.TrainingConfig(task="lm", data=str(tsv), context=8).resolved()
    source, train, held_out = load_data(config)
    # The labels dropped, each text on its own line, the text's own tabs kept.
    expected = "".join(review + "\n" for _, review in reviews)
    assert (source, train + held_out) == (str(tsv), expected)
    assert len(train) == int(len(expected) * 0.9)
    # A .txt file with tabs is read whole.
    txt = tmp_path / "reviews.txt"
    txt.write_text(tsv.read_text())
    config = training.TrainingConfig(task="lm", data=str(txt), context=8).resolved()
    assert "".join(load_data(config)[1:]) == tsv.read_text()
    tsv.write_text("great\tFine.\nno label here\n")
    config = training.TrainingConfig(task="lm", data=str(tsv), context=8).resolved()
    with pytest.raises(ValueError, match=r"reviews\.tsv, line 2"):
        load_data(config)


def test_windows_predict_every_held_out_character_but_the_first_once_from_its_window():
    ids = np.arange(10, 33)  # 23 ids
    context = 5
    inputs, targets = data.text_windows(ids, context)
    predicted = {}
    for row in range(len(inputs)):
        for position in range(context):
            if targets[row, position]:
                start = row * context
                # what the model reads for this target: the window's ids up to it
                predicted.setdefault(int(targets[row, position]), []).append(
                    inputs[row, : position + 1].tolist())
                assert inputs[row, : position + 1].tolist() == ids[start : start + position + 1].tolist()
    assert sorted(predicted) == ids[1:].tolist()
    assert all(len(v) == 1 for v in predicted.values())
    assert all(1 <= len(v[0]) <= context for v in predicted.values())


def test_training_windows_depend_only_on_seed_and_epoch():
    ids = np.arange(4, 60)

    def batches(first_epoch):
        return [(x.numpy(), y.numpy()) for x, y in data.make_text_dataset(
            ids, batch_size=3, context=6, steps_per_epoch=2, seed=5, epochs=3,
            first_epoch=first_epoch)]

    all_epochs, resumed = batches(0), batches(1)
    assert len(all_epochs) == 6
    for (x, y), (x2, y2) in zip(all_epochs[2:], resumed):
        np.testing.assert_array_equal(x, x2)
        np.testing.assert_array_equal(y, y2)
    for x, y in all_epochs:  # windows of consecutive ids, targets shifted by one
        np.testing.assert_array_equal(y, x + 1)
        np.testing.assert_array_equal(np.diff(x, axis=1), 1)


def test_the_download_is_checked_against_its_sha256(tmp_path):
    source = tmp_path / "input.txt"
    source.write_text(_TEXT, encoding="utf-8")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    origin = source.as_uri()  # file://, no network
    path = data.tiny_shakespeare(cache_dir=tmp_path / "cache", origin=origin, sha256=digest)
    assert data.load_text(path) == _TEXT
    with pytest.raises(ValueError, match="hash"):
        data.tiny_shakespeare(cache_dir=tmp_path / "other", origin=origin, sha256="0" * 64)


def test_tiny_shakespeare_ships_with_the_package_and_needs_no_network(monkeypatch):
    def no_download(*args, **kwargs):
        raise AssertionError("tiny_shakespeare() downloaded")

    monkeypatch.setattr(keras.utils, "get_file", no_download)
    path = data.tiny_shakespeare()
    with open(path, "rb") as f:
        raw = f.read()
    assert hashlib.sha256(raw).hexdigest() == data.TINY_SHAKESPEARE_SHA256
    assert len(data.load_text(path)) == 1_115_394
    assert data.load_text(path).startswith("First Citizen:\n")


def test_offline_lm_without_data_says_to_pass_a_text_in_one_line(tmp_path, monkeypatch,
                                                                   capsys):
    import functools

    # Nothing listens on the discard port: the download fails as offline.
    offline = functools.partial(data.tiny_shakespeare, cache_dir=tmp_path / "cache",
                                origin="http://127.0.0.1:9/tinyshakespeare.txt")
    with pytest.raises(ConnectionError, match=r"pass data='FILE\.txt'"):
        offline()
    monkeypatch.setattr(data, "tiny_shakespeare", offline)
    capsys.readouterr()
    assert main(["train", *_TINY, "--out", str(tmp_path / "runs"), "--name", "lm"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("keras-seq train: tiny Shakespeare is not in the Keras cache")
    assert "pass --data FILE.txt" in err
    assert not (tmp_path / "runs" / "lm").exists()


def test_task_options_are_checked_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="argument `data`"):
        training.TrainingConfig(task="translate").resolved()
    with pytest.raises(ValueError, match=r"data='x.tsv' is an option of task='translate', "
                       r".*; received task='dates'"):
        training.TrainingConfig(task="dates", data="x.tsv").resolved()
    with pytest.raises(ValueError, match=r"context=8 is an option of task='lm' or task='bilm'"):
        training.TrainingConfig(context=8).resolved()
    assert training.TrainingConfig(data="x.tsv").resolved().task == "translate"
    lm = training.TrainingConfig(task="lm").resolved()
    assert (lm.model, lm.layers, lm.units, lm.context) == ("transformer", 4, 128, 64)
    assert training.TrainingConfig(task="lm", model="rnn").resolved().cell == "lstm"
    for model in training.BLOCK_MODELS:
        blocks = training.TrainingConfig(task="lm", model=model).resolved()
        assert (blocks.layers, blocks.units, blocks.context) == (4, 128, 64)
    with pytest.raises(ValueError, match=r"TrainingConfig: invalid value for argument `model`: "
                                         r"expected one of 'rnn', 'transformer' for "
                                         r"task='dates', received 'mingru'"):
        training.TrainingConfig(model="mingru").resolved()


# ---------------------------------------------------------------------------
# Sampling


def _model(kind):
    keras.utils.set_random_seed(0)
    return models.language_model(12, kind=kind, num_layers=2, units=8, num_heads=2,
                                 intermediate_dim=16, cell="lstm", dropout=0.0)


# Every kind; the recurrent ones sample one token at a time through their
# cells (the residual blocks: a convolution state, then the cell's; an
# xLSTM's are an mLSTM and an sLSTM).
SAMPLED = list(LANGUAGE_MODEL_KINDS)


def _window_start(k, window):
    """Where the context of position k starts (decoding.sample's documented rule)."""
    keep = window // 2
    d = window - keep
    return 0 if k <= window else d * ((k - 1 - keep) // d)


@pytest.mark.parametrize("kind", SAMPLED)
def test_each_sampled_token_is_drawn_from_the_full_models_softmax_at_its_prefix(kind):
    model = _model(kind)
    prompt = np.array([[5, 6, 7], [8, 9, 4]], np.int32)
    window, length = 4, 9  # the Transformer's cache restarts twice

    @tf.function
    def run(prompt_ids):
        return decoding.sample(model, prompt_ids, length, temperature=1.0, seed=3,
                               context=window, return_logits=True)

    ids, logits = (t.numpy() for t in run(prompt))
    full = np.concatenate([prompt, ids], axis=1)
    assert (ids != 0).all()  # the padding id is never drawn
    for j in range(length):
        k = prompt.shape[1] + j
        start = _window_start(k, window) if kind == "transformer" else 0
        reference = keras.ops.convert_to_numpy(model(full[:, start:k]))[:, -1]
        np.testing.assert_allclose(logits[:, j], reference, atol=1e-5)
    # Same seed, same sample.
    np.testing.assert_array_equal(run(prompt)[0].numpy(), ids)


@pytest.mark.parametrize("kind", ["transformer", "rnn"])
def test_temperature_zero_is_argmax_by_recomputation(kind):
    model = _model(kind)
    prompt = np.array([[5, 6], [7, 3]], np.int32)
    window, length = 5, 8
    ids = tf.function(lambda p: decoding.sample(model, p, length, temperature=0.0,
                                                context=window))(prompt).numpy()
    sequence = prompt
    for _ in range(length):
        k = sequence.shape[1]
        start = 0 if kind == "rnn" else _window_start(k, window)
        logits = keras.ops.convert_to_numpy(model(sequence[:, start:k]))[:, -1]
        logits[:, 0] = -np.inf  # padding is never drawn
        sequence = np.concatenate([sequence, logits.argmax(-1)[:, None]], axis=1)
    np.testing.assert_array_equal(ids, sequence[:, prompt.shape[1]:])


def test_sample_rejects_bad_arguments():
    model = _model("rnn")
    with pytest.raises(ValueError, match="sample: invalid value for argument `temperature`"):
        decoding.sample(model, [[4]], 3, temperature=-1.0)
    with pytest.raises(ValueError, match="sample: invalid shape for argument `prompt_ids`"):
        decoding.sample(model, np.zeros((1, 0), np.int32), 3)
    with pytest.raises(ValueError, match="a keras_seq.tasks.CausalLM"):
        decoding.sample(keras.Sequential([keras.Input((None, 3)), keras.layers.Dense(2)]), [[4]], 3)


# ---------------------------------------------------------------------------
# train --task lm -> generate


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    text_file = root / "text.txt"
    text_file.write_text(_TEXT, encoding="utf-8")
    assert main(["train", *_TINY, "--data", str(text_file), "--out", str(root), "--name", "ref"]) == 0
    return root, text_file, root / "ref"


@pytest.mark.slow
def test_val_loss_is_the_mean_held_out_cross_entropy_of_the_saved_model(lm_run):
    _, _, run_dir = lm_run
    metrics = json.loads((run_dir / "metrics.json").read_text())
    model = keras.saving.load_model(run_dir / "model.keras", safe_mode=True)
    vocabulary = text.load_tokenizer(run_dir).vocabulary
    held_out = _TEXT[int(len(_TEXT) * 0.9):]
    ids = np.array([vocabulary.index(c) for c in held_out])
    context = metrics["config"]["context"]
    losses = []
    for start in range(0, len(ids) - 1, context):  # consecutive windows of context + 1
        window = ids[start : start + context + 1]
        logits = keras.ops.convert_to_numpy(model(window[None, :-1]))[0].astype(np.float64)
        losses += list(-_log_softmax(logits)[np.arange(len(window) - 1), window[1:]])
    assert metrics["val_characters"] == len(losses) == len(held_out) - 1
    np.testing.assert_allclose(metrics["val_loss"], np.mean(losses), rtol=1e-5)
    assert metrics["val_perplexity"] == pytest.approx(math.exp(metrics["val_loss"]))
    rows = (run_dir / "history.csv").read_text().splitlines()
    assert rows[0] == "epoch,step,wall_seconds,loss,val_loss,perplexity,val_perplexity"
    epochs = [row.split(",") for row in rows[1:]]
    assert [(int(r[0]), int(r[1])) for r in epochs] == [(1, 3), (2, 6)]
    for r in epochs:  # the Perplexity metric reports exp(loss) during fit
        assert float(r[5]) == pytest.approx(math.exp(float(r[3])), rel=1e-3)
        assert float(r[6]) == pytest.approx(math.exp(float(r[4])), rel=1e-3)


@pytest.mark.slow
def test_a_fresh_process_loads_a_language_model_run_after_importing_the_models(lm_run):
    import subprocess

    _, _, run_dir = lm_run
    # The run's model.keras is compiled with keras_seq.metrics.Perplexity.
    script = ("import sys, keras, numpy as np, keras_seq.models\n"
              "m = keras.saving.load_model(sys.argv[1], safe_mode=True)\n"
              "np.save(sys.argv[2], keras.ops.convert_to_numpy(m(np.array([[4, 5, 6]]))))\n")
    out = run_dir.parent / "fresh_logits.npy"
    subprocess.run([*python_command(code=script), str(run_dir / "model.keras"), str(out)],
                   check=True, timeout=300, capture_output=True)
    model = keras.saving.load_model(run_dir / "model.keras", safe_mode=True)
    np.testing.assert_allclose(np.load(out), keras.ops.convert_to_numpy(
        model(np.array([[4, 5, 6]]))), atol=1e-6)


@pytest.mark.slow
def test_generate_prints_the_prompt_and_a_seeded_sample(lm_run, capsys):
    _, _, run_dir = lm_run
    capsys.readouterr()
    argv = ["generate", str(run_dir), "--prompt", "All:", "--length", "30", "--seed", "7"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == printed
    expected = training.generate_text(run_dir, "All:", length=30, temperature=1.0, seed=7)
    assert printed == "All:" + expected + "\n" and len(expected) == 30
    assert main(["generate", str(run_dir), "--prompt", "#"]) == 1
    assert capsys.readouterr().err == (
        "keras-seq generate: the prompt '#' has characters the run's vocabulary lacks: '#'.\n")
    assert main(["translate", str(run_dir), "All:"]) == 1
    assert "holds a language model" in capsys.readouterr().err


@pytest.mark.slow
def test_a_crashed_lm_run_resumes_to_the_uninterrupted_weights(lm_run, interrupted_run):
    root, text_file, run_dir = lm_run
    reference = keras.saving.load_model(run_dir / "model.keras", safe_mode=True)
    options = dict(task="lm", model="rnn", units=16, layers=1, context=8, batch_size=4,
                   steps_per_epoch=3, epochs=2, validation_size=4, verbose=0, data=str(text_file),
                   out=str(root), name="crash")
    interrupted_run(**options)
    assert os.path.isfile(root / "crash" / training.BACKUP_DIR / "state.json")
    result = training.train(**options)
    assert result.metrics["resumed_from_epoch"] == 2
    for a, b in zip(reference.get_weights(), result.model.get_weights()):
        np.testing.assert_array_equal(a, b)
