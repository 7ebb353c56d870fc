"""Run folders written by the release before tasks became classes still work in every command.

The folders in `data/release_runs/` were written at commit e32eb7e by
`data/make_release_runs.py`, when every model was a plain functional
`keras.Model` found by its layer names; `data/release_outputs.json` holds
what that release's commands printed for them (`data/record_release_outputs.py`).
Today's commands read them as tasks (`keras_seq.tasks.from_run`) and must
print the same.
"""

import json
import os
import shutil

import keras
import numpy as np
import pytest

from keras_seq import tasks, training
from keras_seq.cli import main

DATA = os.path.join(os.path.dirname(__file__), "data")
RUNS = os.path.join(DATA, "release_runs")
with open(os.path.join(DATA, "release_outputs.json"), encoding="utf-8") as f:
    RELEASE = json.load(f)

TRANSLATORS = ("dates_gru_bahdanau", "dates_lstm_luong", "dates_transformer", "dates_monotonic")
LANGUAGE_MODELS = ("lm_rnn", "lm_transformer", "lm_mingru")
CLASSIFIERS = ("classify_rnn", "classify_fine_tuned")
TASK_OF_RUN = {
    **dict.fromkeys(TRANSLATORS, tasks.Seq2SeqLM),
    **dict.fromkeys(LANGUAGE_MODELS, tasks.CausalLM),
    **dict.fromkeys(CLASSIFIERS, tasks.TextClassifier),
    "bilm": tasks.BidirectionalLM,
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A copy of the release's run folders (a command may write beside them)."""
    root = tmp_path_factory.mktemp("release") / "runs"
    shutil.copytree(RUNS, root)
    return root


@pytest.mark.parametrize("name", sorted(TASK_OF_RUN))
def test_a_release_run_loads_as_its_task_with_its_preprocessor(runs, name):
    task = tasks.from_run(runs / name)
    assert type(task) is TASK_OF_RUN[name]
    with open(runs / name / "vocab.txt", encoding="utf-8") as f:
        assert len(task.preprocessor.tokenizer.vocabulary) == len(f.read().splitlines())


@pytest.mark.parametrize("name", TRANSLATORS)
def test_translate_prints_what_the_release_printed(runs, name, capsys):
    expected = RELEASE[name]
    for beam, outputs in (("1", expected["greedy"]), ("3", expected["beam_3"])):
        capsys.readouterr()
        assert main(["translate", str(runs / name), "--beam", beam, *expected["sources"]]) == 0
        assert capsys.readouterr().out.splitlines() == outputs


@pytest.mark.parametrize("name", LANGUAGE_MODELS)
def test_generate_prints_what_the_release_printed(runs, name, capsys):
    expected = RELEASE[name]
    capsys.readouterr()
    argv = ["generate", str(runs / name), "--prompt", expected["prompt"], "--length", "30",
            "--temperature", "0"]
    assert main(argv) == 0
    assert capsys.readouterr().out == expected["prompt"] + expected["greedy_30"] + "\n"


@pytest.mark.parametrize("name", CLASSIFIERS)
def test_classify_prints_what_the_release_printed(runs, name, capsys):
    expected = RELEASE[name]
    capsys.readouterr()
    assert main(["classify", str(runs / name), *expected["texts"]]) == 0
    printed = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [label for label, _ in printed] == [label for label, _ in expected["labels"]]
    np.testing.assert_allclose([float(p) for _, p in printed],
                               [p for _, p in expected["labels"]], atol=1e-4)


@pytest.mark.parametrize("name", ["dates_transformer", "lm_mingru"])
def test_a_release_run_saved_as_a_task_reloads_with_the_same_outputs(runs, name, tmp_path):
    task = tasks.from_run(runs / name)
    task.save(tmp_path / "task.keras")
    again = keras.saving.load_model(tmp_path / "task.keras", safe_mode=True)
    assert type(again) is type(task)
    assert again.preprocessor.tokenizer.vocabulary == task.preprocessor.tokenizer.vocabulary
    ids = np.array([[5, 6, 7, 0], [4, 4, 9, 8]], "int32")
    inputs = [ids, ids] if isinstance(task, tasks.Seq2SeqLM) else ids
    np.testing.assert_allclose(again(inputs), task(inputs), atol=1e-6)


# Each format's writer is tested on today's runs; here each kind of release
# run is read by export (every format of the richest, monotonic attention's
# stream included; one format of the others) and its export verified.
@pytest.mark.slow
@pytest.mark.parametrize("name, formats", [("dates_monotonic", []), ("lm_mingru", []),
                                           ("classify_fine_tuned", ["--formats", "savedmodel"])])
def test_a_release_run_exports_and_verifies(runs, name, formats, tmp_path, capsys):
    out = tmp_path / "export"
    assert main(["export", str(runs / name), str(out), "--examples", "8", *formats]) == 0
    capsys.readouterr()
    assert main(["verify", str(out)]) == 0, capsys.readouterr().err


@pytest.mark.slow
def test_a_classifier_fine_tunes_from_a_release_language_model(runs, tmp_path):
    data = tmp_path / "labelled.tsv"
    data.write_text("".join(f"{('good', 'bad')[i % 2]}\tsome words number {i}\n"
                            for i in range(30)))
    result = training.train(task="classify", data=str(data), init_from=str(runs / "lm_mingru"),
                            freeze_body=True, epochs=1, out=str(tmp_path / "runs"),
                            name="probe", verbose=0)
    assert type(result.model) is tasks.TextClassifier
    # A frozen body keeps the weights the release's language model saved.
    language_model = tasks.from_run(runs / "lm_mingru")
    expected = [np.asarray(w) for w in language_model.backbone.weights]
    body = [np.asarray(w) for w in result.model.backbone.weights]
    assert len(body) == len(expected) > 0
    for got, want in zip(body, expected):
        np.testing.assert_array_equal(got, want)
    label, probability = tasks.from_run(result.run_dir).classify(["some words"])[0]
    assert label in ("good", "bad") and 0.5 <= probability <= 1.0
