"""KerasTuner search spaces: built models follow the hyperparameters; a search runs;
`search` (``keras-seq tune``) saves its best model as a run folder."""

import os
import subprocess
import sys

import keras
import keras_tuner
import numpy as np
import pytest

from keras_seq import layers
from keras_seq.layers import ConvertibleLSTM, ConvertibleSimpleRNN
from keras_seq.tuning import ClassifierHyperModel, Seq2SeqHyperModel

_EXPECTED_LAYER = {
    "gru": layers.GRU,
    "lstm": ConvertibleLSTM,  # Keras' LSTM with a convertible inference loop
    "peephole": layers.PeepholeLSTM,
    "coupled": layers.CoupledGateLSTM,
    "simple": ConvertibleSimpleRNN,  # Keras' SimpleRNN (Elman), same treatment
}


def _encoder_layers(model):
    return [
        layer.forward_layer
        for layer in model._flatten_layers()
        if isinstance(layer, keras.layers.Bidirectional)
    ]


@pytest.mark.parametrize("cell", sorted(_EXPECTED_LAYER))
def test_seq2seq_hypermodel_builds_the_chosen_cell_and_sizes(cell):
    hp = keras_tuner.HyperParameters()
    hp.Fixed("cell", cell)
    hp.Fixed("units", 16)
    hp.Fixed("learning_rate", 3e-3)
    model = Seq2SeqHyperModel(12, 9, units=(8, 16), embedding_dims=(4,)).build(hp)
    (encoder,) = _encoder_layers(model)
    assert type(encoder) is _EXPECTED_LAYER[cell]
    assert encoder.units == 16
    assert float(model.optimizer.learning_rate) == pytest.approx(3e-3)
    # The final Dense projects onto the target vocabulary.
    assert model.output.shape[-1] == 9


def test_classifier_search_records_scores_that_the_best_model_reproduces(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(1, 10, size=(96, 7)).astype("int32")
    y = (x[:, 0] % 2).astype("int32")  # class = parity of the first token
    tuner = keras_tuner.RandomSearch(
        ClassifierHyperModel(10, 2, cells=("gru", "coupled"), units=(8,), max_layers=1),
        objective="val_loss",
        max_trials=2,
        seed=1,
        directory=str(tmp_path),
        project_name="search",
    )
    tuner.search(x[:64], y[:64], validation_data=(x[64:], y[64:]), epochs=1, verbose=0)

    trials = list(tuner.oracle.trials.values())
    assert len(trials) == 2
    best_trial = tuner.oracle.get_best_trials(1)[0]
    assert best_trial.score == min(t.score for t in trials)
    # The best model, reloaded from its checkpoint, gives the score the tuner recorded.
    best_model = tuner.get_best_models(1)[0]
    val_loss = best_model.evaluate(x[64:], y[64:], verbose=0, return_dict=True)["loss"]
    assert val_loss == pytest.approx(best_trial.score, rel=1e-4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cells": ("gru", "rnn")}, "Seq2SeqHyperModel: invalid value for argument `cells`"),
        ({"units": (0,)}, "Seq2SeqHyperModel: invalid value for argument `units`"),
        ({"attention": ()}, "Seq2SeqHyperModel: invalid value for argument `attention`: expected at least one"),
        ({"max_dropout": 1.0}, r"Seq2SeqHyperModel: invalid value for argument `max_dropout`: expected a number in \[0.0, 1.0\)"),
        ({"learning_rate": (1e-2, 1e-3)}, "Seq2SeqHyperModel: invalid value for argument `learning_rate`"),
    ],
)
def test_seq2seq_hypermodel_rejects_bad_search_spaces(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Seq2SeqHyperModel(10, 10, **kwargs)


def test_hypermodels_accept_numpy_integers_and_reject_bools():
    hypermodel = Seq2SeqHyperModel(np.int64(12), 9, units=(np.int32(8),), embedding_dims=(4,))
    assert hypermodel.units == [8] and type(hypermodel.units[0]) is int
    with pytest.raises(TypeError, match="Seq2SeqHyperModel: invalid type for argument `units`"):
        Seq2SeqHyperModel(12, 9, units=(True,))
    with pytest.raises(TypeError, match="ClassifierHyperModel: invalid type for argument `max_layers`"):
        ClassifierHyperModel(10, 2, max_layers=False)


def test_classifier_hypermodel_rejects_widths_that_heads_do_not_divide():
    with pytest.raises(ValueError, match="ClassifierHyperModel: invalid value for argument `units`: expected widths divisible"):
        ClassifierHyperModel(10, 2, kinds=("transformer",), units=(30,), num_heads=4)


# ---------------------------------------------------------------------------
# `search` (`keras-seq tune`): a 2-trial search on a tiny TSV task


def _reference_greedy(model, tokenizer, sources, source_length, target_length):
    """Greedy decoding without `keras_seq.decoding`: the whole teacher-forced
    model is run again for each output position and its argmax appended."""
    from keras_seq.reserved_tokens import END_ID, PAD_ID, START_ID

    encoder_inputs = np.asarray(tokenizer.encode(sources, source_length))
    ids = np.full((len(sources), target_length), PAD_ID, np.int32)
    decoder_inputs = np.full_like(ids, PAD_ID)
    decoder_inputs[:, 0] = START_ID
    done = np.zeros(len(sources), bool)
    for t in range(target_length):
        logits = model({"encoder_inputs": encoder_inputs, "decoder_inputs": decoder_inputs})
        y = np.where(done, PAD_ID, np.argmax(np.asarray(logits)[:, t], axis=-1))
        ids[:, t] = y
        done |= y == END_ID
        if t + 1 < target_length:
            decoder_inputs[:, t + 1] = y
    return [s.decode("utf-8") for s in tokenizer.detokenize(ids).numpy()]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """`keras-seq tune` in-process: 2 random trials of a GRU seq2seq of width 8."""
    import contextlib
    import io

    from keras_seq.cli import main

    out = tmp_path_factory.mktemp("tune")
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("abcd"), size=rng.integers(1, 4))) for _ in range(400)]
    data = out / "pairs.tsv"
    data.write_text("".join(f"{w}\t{w[0]}\n" for w in words))  # target: the first letter
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["tune", "--trials", "2", "--data", str(data), "--out", str(out),
                     "--name", "best", "--cells", "gru", "--units", "8",
                     "--embedding-dims", "8", "--epochs", "3", "--batch-size", "16",
                     "--test-size", "40", "--verbose", "0"]) == 0
    return out / "best", printed.getvalue()


def _metrics(run_dir):
    import json

    return json.loads((run_dir / "metrics.json").read_text())


@pytest.mark.slow
def test_tune_prints_the_results_table_and_saves_the_best_trial_as_a_run(tuned):
    import json

    run_dir, printed = tuned
    assert "Results summary" in printed and printed.count("Score:") == 2
    for name in ("model.keras", "vocab.txt", "tokenizer.json", "metrics.json"):
        assert (run_dir / name).stat().st_size > 0, name
    assert any(f.startswith("events.out.tfevents")
               for _, _, files in os.walk(run_dir / "logs") for f in files)
    # KerasTuner's own trial records: the run is the trial with the lowest val_loss.
    trials = [json.loads(p.read_text()) for p in (run_dir / "search").glob("trial_*/trial.json")]
    assert len(trials) == 2
    best = min(trials, key=lambda t: t["score"])
    metrics = _metrics(run_dir)
    assert metrics["search"]["best_score"] == pytest.approx(best["score"])
    assert metrics["search"]["best_hyperparameters"] == best["hyperparameters"]["values"]
    assert metrics["search"]["trials"] == 2
    config = metrics["config"]
    assert (config["cell"], config["units"]) == ("gru", 8)
    assert config["learning_rate"] == best["hyperparameters"]["values"]["learning_rate"]
    assert f"Run written to {run_dir}" in printed


@pytest.mark.slow
def test_tuned_run_translates_as_its_own_greedy_decoding(tuned):
    import keras

    from keras_seq import text, training

    run_dir, _ = tuned
    config = _metrics(run_dir)["config"]
    sources = ["abc", "dd", "b", "cab"]
    command = subprocess.run(
        [sys.executable, "-m", "keras_seq_command", "translate", str(run_dir), *sources],
        capture_output=True, text=True, timeout=300, check=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    model = keras.saving.load_model(run_dir / "model.keras")
    reference = _reference_greedy(model, text.load_tokenizer(str(run_dir)), sources,
                                  config["source_length"], config["target_length"])
    assert command.stdout.splitlines() == reference
    assert training.translate_texts(run_dir, sources) == reference


@pytest.mark.slow
def test_tuned_run_metrics_equal_a_re_evaluation_of_the_saved_model(tuned):
    import keras

    from keras_seq import text, training

    run_dir, _ = tuned
    metrics = _metrics(run_dir)
    config = metrics["config"]
    fields = {f: config[f] for f in ("data", "train_size", "validation_size", "test_size", "seed")}
    _, _, test_pairs = training.load_pairs(training.TrainingConfig(**fields).resolved())
    model = keras.saving.load_model(run_dir / "model.keras")
    outputs = _reference_greedy(model, text.load_tokenizer(str(run_dir)),
                                [s for s, _ in test_pairs],
                                config["source_length"], config["target_length"])
    assert len(set(outputs)) > 1  # the model reads its inputs (18 of 40 right when written)
    correct = sum(o == t for o, (_, t) in zip(outputs, test_pairs))
    assert (metrics["test_correct"], metrics["test_examples"]) == (correct, len(test_pairs))
    assert metrics["test_exact_match"] == correct / len(test_pairs)


def test_search_rejects_bad_options_before_any_work(tmp_path):
    from keras_seq import tuning

    with pytest.raises(ValueError, match="search: invalid value for argument `tuner`"):
        tuning.search(tuner="grid", out=str(tmp_path))
    with pytest.raises(ValueError, match="search: invalid value for argument `trials`"):
        tuning.search(trials=0, out=str(tmp_path))
    with pytest.raises(TypeError, match="search: invalid type for argument `trials`"):
        tuning.search(trials=True, out=str(tmp_path))
    with pytest.raises(ValueError, match=r"search: invalid value for argument `distribute`: "
                       r"expected 'none', 'auto' or 'mirrored'.*keras-tuner#910"):
        tuning.search(distribute="multi_worker", out=str(tmp_path))
    with pytest.raises(ValueError, match="search: invalid value for argument `model`"):
        tuning.search(model="transformer", out=str(tmp_path))
    with pytest.raises(ValueError, match="Seq2SeqHyperModel: invalid value for argument `cells`"):
        tuning.search(cells=("rnn",), out=str(tmp_path))
    assert list(tmp_path.iterdir()) == []  # no run folder was created
