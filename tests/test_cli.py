"""The `keras-seq` command line, end to end at tiny sizes."""

import json
import os
import subprocess
import sys

import pytest

from keras_seq.cli import main

_TINY = ["--train-size", "300", "--validation-size", "30", "--test-size", "40", "--units", "16",
         "--batch-size", "32", "--epochs", "1", "--verbose", "0"]


@pytest.fixture(scope="module")
def date_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    assert main(["train", "--out", str(out), "--name", "dates", *_TINY]) == 0
    return out / "dates"


@pytest.mark.slow
def test_train_writes_every_artifact(date_run):
    for name in ("model.keras", "vocab.txt", "tokenizer.json", "metrics.json"):
        assert (date_run / name).stat().st_size > 0, name
    with open(date_run / "attention.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    event_files = [f for _, _, files in os.walk(date_run / "logs") for f in files
                   if f.startswith("events.out.tfevents")]
    assert event_files
    metrics = json.loads((date_run / "metrics.json").read_text())
    assert metrics["test_examples"] == 40
    assert metrics["test_exact_match"] == metrics["test_correct"] / 40
    assert metrics["config"]["model"] == "rnn" and metrics["config"]["cell"] == "gru"
    wrong = [e for e in metrics["examples"] if e["output"] != e["target"]]
    assert len(metrics["errors"]) == min(50, 40 - metrics["test_correct"])
    assert all(e in metrics["errors"] for e in wrong)


@pytest.mark.slow
def test_translate_prints_the_evaluated_greedy_outputs(date_run, capsys):
    examples = json.loads((date_run / "metrics.json").read_text())["examples"][:3]
    capsys.readouterr()
    assert main(["translate", str(date_run), *[e["source"] for e in examples]]) == 0
    assert capsys.readouterr().out.splitlines() == [e["output"] for e in examples]
    assert main(["translate", str(date_run), "--beam", "1",
                 *[e["source"] for e in examples]]) == 0
    assert capsys.readouterr().out.splitlines() == [e["output"] for e in examples]
    assert main(["translate", str(date_run), "--beam", "3", "21 Nov 2026", ""]) == 0
    assert len(capsys.readouterr().out.split("\n")) == 3  # two lines, the second may be empty


@pytest.mark.slow
def test_export_writes_a_savedmodel_that_answers_like_the_evaluation(date_run, tmp_path, capsys):
    import tensorflow as tf

    examples = json.loads((date_run / "metrics.json").read_text())["examples"][:3]
    assert main(["export", str(date_run), str(tmp_path), "--formats", "savedmodel"]) == 0
    assert "savedmodel:" in capsys.readouterr().out
    served = tf.saved_model.load(str(tmp_path / "translator" / "1"))
    outputs = served.signatures["serving_default"](
        inputs=tf.constant([e["source"] for e in examples])
    )["outputs"]
    assert [o.decode() for o in outputs.numpy()] == [e["output"] for e in examples]


@pytest.mark.slow
def test_train_transformer_on_a_tsv_file(tmp_path, capsys):
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{w}\t{w[::-1]}\tCC-BY\n" for w in
                            ("abc", "hello", "keras", "tensor", "flow", "seq", "model") * 6))
    assert main(["train", "--model", "transformer", "--data", str(data), "--out",
                 str(tmp_path), "--name", "tsv", "--layers", "1", *_TINY]) == 0
    assert "Held-out exact match" in capsys.readouterr().out
    metrics = json.loads((tmp_path / "tsv" / "metrics.json").read_text())
    assert metrics["config"]["model"] == "transformer"
    with open(tmp_path / "tsv" / "attention.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert metrics["train_examples"] + metrics["test_examples"] < 42


@pytest.mark.slow
def test_train_under_mirrored_strategy_with_two_cpu_replicas(tmp_path):
    script = (
        "import tensorflow as tf\n"
        "cpu = tf.config.list_physical_devices('CPU')[0]\n"
        "tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)\n"
        "from keras_seq.cli import main\n"
        f"main(['train', '--distribute', 'mirrored', '--out', {str(tmp_path)!r}, '--name', 'm',"
        f" *{_TINY!r}])\n"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=600)
    metrics = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert metrics["replicas"] == 2


def test_train_help_shows_the_defaults_train_uses(capsys):
    from keras_seq import training

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"--batch-size BATCH_SIZE default: {training.default_for('batch_size')}" in help_text
    assert (f"default: {training.default_for('epochs')} (gru, simple), "
            f"{training.default_for('epochs', 'transformer')} (LSTM cells and transformer)"
            in help_text)
    assert f"(default: {training.TrainingConfig().out})" in help_text


def test_bad_flags_exit_with_a_usage_error(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--epochs", "0"])
    assert "--epochs must be positive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--cell", "rnn"])
    with pytest.raises(SystemExit):
        main(["translate", "no-such-run", "x"])


def test_bad_export_and_verify_arguments_exit_with_a_message(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["export", "run", "out", "--examples", "0"])
    assert "--examples must be positive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["export", "run", "out", "--quantize", "int8"])
    assert "invalid choice: 'int8'" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="keras-seq verify: .*manifest.json does not exist"):
        main(["verify", str(tmp_path)])


def test_tune_refuses_multi_worker_and_unknown_tuners_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit, match=r"keras-seq tune: search: invalid value for argument "
                       r"`distribute`.*keras-tuner#910"):
        main(["tune", "--distribute", "multi_worker", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        main(["tune", "--tuner", "grid", "--out", str(tmp_path)])
    assert "invalid choice: 'grid'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tune", "--trials", "0"])
    assert "--trials must be positive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tune", "--units", "8", "0"])
    assert "--units must be positive" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
