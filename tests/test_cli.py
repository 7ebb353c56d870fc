"""The `keras-seq` command line, end to end at tiny sizes."""

import dataclasses
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from tensorflow_log import TENSORFLOW_LOG

from keras_seq.cli import main


@pytest.fixture(scope="module")
def date_run(tiny_date_run):
    """The tiny date run's folder (conftest)."""
    from pathlib import Path

    return Path(tiny_date_run.run_dir)


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
def test_translate_reads_a_file_or_standard_input_one_input_per_line(date_run, tmp_path,
                                                                     capsys, monkeypatch):
    import io

    examples = json.loads((date_run / "metrics.json").read_text())["examples"][:3]
    lines = [e["source"] for e in examples]
    expected = [e["output"] for e in examples]  # the run's own greedy evaluation
    (tmp_path / "inputs.txt").write_text("\r\n".join(lines) + "\r\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["translate", str(date_run), "--input", str(tmp_path / "inputs.txt")]) == 0
    assert capsys.readouterr().out.splitlines() == expected
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines)))
    assert main(["translate", str(date_run), "--input", "-"]) == 0
    assert capsys.readouterr().out.splitlines() == expected
    assert main(["translate", str(date_run), "--input", str(tmp_path / "missing.txt")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("keras-seq translate: the input file ") and err.count("\n") == 1
    assert "does not exist; --input takes a file" in err


@pytest.mark.slow
def test_greedy_is_beam_1_everywhere_and_beam_0_still_works_with_a_deprecation(date_run,
                                                                               capsys):
    from keras_seq import training

    examples = json.loads((date_run / "metrics.json").read_text())["examples"][:3]
    sources, expected = [e["source"] for e in examples], [e["output"] for e in examples]
    capsys.readouterr()
    assert main(["translate", str(date_run), "--beam", "0", *sources]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == expected
    assert captured.err.startswith("keras-seq translate: warning: --beam 0: ")
    assert "deprecated" in captured.err and captured.err.count("\n") == 1
    assert training.translate_texts(date_run, sources) == expected
    with pytest.warns(DeprecationWarning, match="greedy is a beam width of 1"):
        assert training.translate_texts(date_run, sources, beam_width=0) == expected


@pytest.mark.slow
def test_export_writes_a_savedmodel_that_answers_like_the_evaluation(date_run, tmp_path, capsys):
    import tensorflow as tf

    examples = json.loads((date_run / "metrics.json").read_text())["examples"][:3]
    assert main(["export", str(date_run), str(tmp_path), "--formats", "savedmodel"]) == 0
    captured = capsys.readouterr()
    assert "savedmodel:" in captured.out
    # One line as each artifact starts, one with its seconds when it is written.
    progress = captured.err.splitlines()
    assert [line.split(" in ")[0] for line in progress] == [
        "export: translator/1 (SavedModel) ...", "export: translator/1 (SavedModel)",
        "export: reference.npz (Keras' translations) ...",
        "export: reference.npz (Keras' translations)"]
    assert all(re.fullmatch(r".* in \d+\.\d s", line) for line in progress[1::2])
    served = tf.saved_model.load(str(tmp_path / "translator" / "1"))
    outputs = served.signatures["serving_default"](
        inputs=tf.constant([e["source"] for e in examples])
    )["outputs"]
    assert [o.decode() for o in outputs.numpy()] == [e["output"] for e in examples]


def test_train_options_reach_the_model_luong_attention_a_layernorm_lstm_and_zoneout():
    """The options as parsed become the run's config and the model `train` builds."""
    from keras_seq import recipes, text
    from keras_seq.cli.commands import _config_options
    from keras_seq.cli.parser import build_parser
    from keras_seq.recipes.translation import PreparedData
    from keras_seq.run_config import TrainingConfig

    args = build_parser()[0].parse_args(
        ["train", "--attention", "luong", "--cell", "layernorm_lstm", "--zoneout", "0.1",
         "--units", "8"])
    config = TrainingConfig(**_config_options(args)).resolved()
    assert (config.attention, config.cell, config.zoneout) == ("luong", "layernorm_lstm", 0.1)
    tokenizer = text.CharTokenizer.from_corpus(["abcdefgh"])
    prepared = PreparedData(*[None] * len(dataclasses.fields(PreparedData)))
    prepared.tokenizer, prepared.source_length, prepared.target_length = tokenizer, 8, 8
    model = recipes.get(config.task).build(config, prepared)
    decoder = model.decoder
    decoder_inputs = {"encoder_inputs": np.ones((1, 3), "int32"),
                      "decoder_inputs": np.ones((1, 2), "int32")}
    assert model(decoder_inputs).shape == (1, 2, 12)  # 4 reserved tokens and 8 letters
    assert type(decoder.attention).__name__ == "LuongAttention"
    # The decoder zones out its cell's states itself, whatever the cell.
    assert type(decoder.cell).__name__ == "LayerNormLSTMCell" and decoder.zoneout == 0.1
    encoder = model.encoder.get_layer("bidirectional_encoder")
    assert type(encoder.forward_layer).__name__ == "LayerNormLSTM"
    assert encoder.forward_layer.zoneout == 0.1


@pytest.mark.slow
def test_train_transformer_on_a_tsv_file(tmp_path, capsys, tiny_run_args):
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{w}\t{w[::-1]}\tCC-BY\n" for w in
                            ("abc", "hello", "keras", "tensor", "flow", "seq", "model") * 6))
    assert main(["train", "--model", "transformer", "--data", str(data), "--out",
                 str(tmp_path), "--name", "tsv", "--layers", "1", *tiny_run_args]) == 0
    assert "Held-out exact match" in capsys.readouterr().out
    metrics = json.loads((tmp_path / "tsv" / "metrics.json").read_text())
    assert metrics["config"]["model"] == "transformer"
    with open(tmp_path / "tsv" / "attention.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert metrics["train_examples"] + metrics["test_examples"] < 42


@pytest.mark.slow
def test_train_under_mirrored_strategy_with_two_cpu_replicas(tmp_path):
    # Smaller than the tiny run: what costs here is tracing for two replicas,
    # less for pairs of 2-3 letters than for the dates.
    data = tmp_path / "pairs.tsv"
    data.write_text("ab\tba\nabc\tcba\nbca\tacb\ncab\tbac\n" * 10, encoding="utf-8")
    args = ["--data", str(data), "--units", "8", "--batch-size", "32", "--epochs", "1",
            "--verbose", "0"]
    script = (
        "import tensorflow as tf\n"
        "cpu = tf.config.list_physical_devices('CPU')[0]\n"
        "tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)\n"
        "from keras_seq.cli import main\n"
        f"main(['train', '--distribute', 'mirrored', '--out', {str(tmp_path)!r}, '--name', 'm',"
        f" *{args!r}])\n"
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
    assert (f"default: {training.default_for('epochs')} (rnn), "
            f"{training.default_for('epochs', 'rnn', 'lstm')} (LSTM cells and transformer)"
            in help_text)
    assert training.default_for("epochs", "rnn", "lstm") == training.default_for(
        "epochs", "transformer")
    assert f"(default: {training.TrainingConfig().out})" in help_text


def test_bad_flags_exit_with_a_usage_error(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--epochs", "0"])
    assert "--epochs must be positive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--cell", "rnn"])
    assert main(["translate", "no-such-run", "x"]) == 1


def test_bad_export_and_verify_arguments_exit_with_a_message(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["export", "run", "out", "--examples", "0"])
    assert "--examples must be positive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["export", "run", "out", "--quantize", "int4"])
    assert "invalid choice: 'int4'" in capsys.readouterr().err
    capsys.readouterr()
    assert main(["verify", str(tmp_path)]) == 1
    assert re.fullmatch(r"keras-seq verify: .*manifest.json does not exist.*\n",
                        capsys.readouterr().err)


def test_tune_refuses_multi_worker_and_unknown_tuners_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["tune", "--distribute", "multi_worker", "--out", str(tmp_path)])
    assert exit_.value.code == 2
    assert "invalid choice: 'multi_worker'" in capsys.readouterr().err
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


# ---------------------------------------------------------------------------
# First contact: exit codes, one-line errors, nothing half-written


def _usage_error(capsys, argv):
    """Runs ``main(argv)``, expects an argument error; returns stderr."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, usage, message",
    [
        (["train", "--task", "dates", "--data", "x.tsv"], "train",
         "--data x.tsv is an option of --task translate, --task lm, --task bilm, --task "
         "classify or --task tag; received --task dates."),
        (["train", "--units", "0"], "train", "--units must be positive, got 0"),
        (["train", "--model", "transformer", "--cell", "gru"], "train",
         "--cell gru chooses the recurrent cell of --model rnn; --model transformer has none"),
        (["train", "--task", "lm", "--model", "xlstm", "--cell", "gru"], "train",
         "--model xlstm has none of its own to choose (leave --cell out)"),
        (["train", "--model", "mingru"], "train",
         "invalid value for --model: expected one of 'rnn', 'transformer' for --task dates, "
         "received mingru."),
        (["train", "--model", "transformer", "--attention", "none"], "train", "--attention"),
        (["train", "--task", "lm", "--attention", "none"], "train",
         "--attention none is an option of --task dates or --task translate; received --task "
         "lm."),
        (["train", "--model", "transformer", "--zoneout", "0.1"], "train",
         "--zoneout 0.1 is an option of --model rnn translation models; received --model "
         "transformer."),
        # The option conflicts of issue 53, each in the command's flags.
        (["train", "--zoneout", "1.5"], "train",
         "invalid value for --zoneout: expected a number in [0.0, 1.0), received 1.5."),
        (["train", "--scheduled-sampling", "2"], "train",
         "invalid value for --scheduled-sampling: expected a number in [0.0, 1.0], received "
         "2.0."),
        (["train", "--lm-weight", "0.5"], "train",
         "--lm-weight 0.5 is an option of --task classify; received --task dates."),
        (["train", "--tokenizer", "wordpiece"], "train",
         "--tokenizer wordpiece is an option of --task bilm or --task classify; received "
         "--task dates."),
        (["train", "--model", "mingru", "--task", "dates"], "train",
         "expected one of 'rnn', 'transformer' for --task dates, received mingru."),
        (["train", "--pooling", "mean"], "train",
         "--pooling mean is an option of --task classify; received --task dates."),
        (["train", "--task", "lm", "--test-data", "x.tsv"], "train",
         "--test-data x.tsv is an option of --task classify or --task tag; received --task "
         "lm."),
        (["train", "--task", "bilm", "--vocab-size", "100"], "train",
         "--vocab-size 100 is the size of a learned vocabulary (a character vocabulary is "
         "every character of the text): it needs --tokenizer wordpiece."),
        (["train", "--task", "bilm", "--model", "transformer"], "train",
         "invalid value for --model: expected 'rnn' for --task bilm, received "
         "transformer."),
        (["translate", "no-such-run", "x", "--beam", "-1"], "translate", "--beam must be >= 1"),
        (["translate", "no-such-run"], "translate", "nothing to translate"),
        (["translate", "no-such-run", "x", "--input", "-"], "translate", "not both"),
        (["translate", "no-such-run", "x", "--beam", "1", "--length-penalty", "0.6"],
         "translate", "--length-penalty applies to beam search only"),
        (["translate", "no-such-run", "x", "--beam", "3", "--length-penalty", "-5"],
         "translate", "--length-penalty must be >= 0, got -5.0"),
        (["translate", "no-such-run", "x", "--length-penalty", "0.6"], "translate",
         "--length-penalty applies to beam search only"),
        (["generate", "no-such-run", "--prompt", "a", "--temperature", "-1"], "generate",
         "--temperature must be >= 0"),
    ],
)
def test_argument_errors_exit_2_with_the_commands_usage_before_loading(capsys, argv, usage,
                                                                       message):
    # "no-such-run" does not exist: an error about it would mean the command ran.
    err = _usage_error(capsys, argv)
    assert err.startswith(f"usage: keras-seq {usage} ")
    assert f"keras-seq {usage}: error: " in err and message in err
    # In the command's words: never the library's argument names.
    assert "TrainingConfig" not in err and "`" not in err


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "the data file {path} does not exist"),
        (b"a b\nc d\n", "{path}, line 1: expected source<TAB>target, found no tab"),
        (b"\xff\xfe\tx\n", "{path}, line 1: not valid UTF-8"),
        (b"", "{path} holds 0 source<TAB>target pair(s)"),
        (b"a\tb\nc\td\n", "{path} holds 2 source<TAB>target pair(s)"),
    ],
)
def test_train_on_bad_data_says_so_in_one_line_and_creates_nothing(tmp_path, capsys, content,
                                                                   message):
    path = tmp_path / "pairs.tsv"
    if content is not None:
        path.write_bytes(content)
    out = tmp_path / "runs"
    assert main(["train", "--data", str(path), "--out", str(out), "--verbose", "1"]) == 1
    captured = capsys.readouterr()
    assert "Strategy:" not in captured.out  # stopped before the run started
    assert captured.err.count("\n") == 1 and captured.err.startswith("keras-seq train: ")
    assert message.format(path=path) in captured.err
    assert not out.exists()


def test_export_errors_are_one_line_without_a_traceback(tmp_path, capsys):
    assert main(["export", str(tmp_path / "no-run"), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert re.match(r"keras-seq export: \S*no-run is not a run folder: .*metrics.json does not "
                    r"exist", err)
    assert not (tmp_path / "out").exists()
    (tmp_path / "a-file").write_text("mine")
    assert main(["export", str(tmp_path / "no-run"), str(tmp_path / "a-file")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a-file is a file" in err
    assert (tmp_path / "a-file").read_text() == "mine"


@pytest.mark.slow
def test_export_over_an_export_is_refused_and_overwrite_replaces_it_whole(date_run, tmp_path,
                                                                         capsys, monkeypatch):
    from keras_seq.export import translation_export as export_module

    out = tmp_path / "out"
    assert main(["export", str(date_run), str(out), "--formats", "savedmodel"]) == 0
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    capsys.readouterr()
    # Into a non-empty folder: refused, nothing touched.
    assert main(["export", str(date_run), str(out), "--formats", "tflite"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not empty" in err and "--overwrite" in err
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    # An --overwrite that fails half-way (after the TFLite files): the old export stays whole.
    def fail(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export_module, "_export_onnx", fail)
    assert main(["export", str(date_run), str(out), "--formats", "tflite", "onnx",
                 "--overwrite"]) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    assert sorted(os.listdir(tmp_path)) == ["out"]  # no partial folder left behind
    monkeypatch.undo()
    # --overwrite: the new export only, none of the old files.
    assert main(["export", str(date_run), str(out), "--formats", "tflite", "--overwrite"]) == 0
    assert sorted(os.listdir(out)) == ["manifest.json", "reference.npz", "tflite"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert [a["artifact"] for a in manifest["artifacts"]] == ["tflite"]
    assert sorted(os.listdir(tmp_path)) == ["out"]


@pytest.mark.slow
def test_translate_warns_about_inputs_it_reads_otherwise(date_run, capsys):
    config = json.loads((date_run / "metrics.json").read_text())["config"]
    vocabulary = (date_run / "vocab.txt").read_text(encoding="utf-8").split("\n")
    length = config["source_length"]
    too_long = " " * length + "3 May 1999"
    unknown = next(c for c in "§¤@#~^" if c not in vocabulary)
    inputs = [too_long, f"3 May{unknown}1999", "", "3 May 1999"]
    assert main(["translate", str(date_run), *inputs]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.split("\n")) == len(inputs) + 1  # one line per input
    warnings_ = captured.err.splitlines()
    assert len(warnings_) == 3, warnings_
    assert warnings_[0].startswith("keras-seq translate: warning: input 1 ")
    assert f"{length + 10} tokens, more than the run's source length {length}" in warnings_[0]
    assert f"only {' ' * length!r} is translated" in warnings_[0]
    assert warnings_[1].startswith("keras-seq translate: warning: input 2 ")
    assert f"outside the run's vocabulary ({unknown!r})" in warnings_[1]
    assert warnings_[2].startswith("keras-seq translate: warning: input 3 '' is empty")


@pytest.mark.slow
def test_a_monotonic_run_on_the_dates_says_why_its_result_is_low(tmp_path, capsys,
                                                                 tiny_run_args):
    """The dates' output starts with the year, which the source gives last:
    no left-to-right alignment exists, and the run says so in one line."""
    assert main(["train", "--attention", "monotonic_luong", "--out", str(tmp_path),
                 "--name", "mono", *tiny_run_args]) == 0
    err = capsys.readouterr().err
    metrics = json.loads((tmp_path / "mono" / "metrics.json").read_text())
    assert metrics["test_exact_match"] < 0.5 and metrics["out_of_source_order"] > 0.2
    assert err.count("\n") == 1, err
    assert err.startswith(
        f"keras-seq train: warning: the monotonic_luong attention reached "
        f"{metrics['test_exact_match']:.2%} held-out exact match, and "
        f"{metrics['out_of_source_order']:.0%} of the output characters that copy the source "
        "come out of the source's order"), err
    assert err.rstrip().endswith("use the bahdanau or luong attention"), err


def test_the_share_of_characters_out_of_source_order_is_from_the_longest_common_subsequence():
    from keras_seq.recipes.translation import out_of_source_order

    assert out_of_source_order([("abcde", "aabcdee")]) == 0.0  # doubled vowels: in order
    # "abc" -> "cab": 3 shared, the longest common subsequence "ab" keeps 2.
    assert out_of_source_order([("abc", "cab")]) == pytest.approx(1 / 3)
    # A date: 8 shared characters, of which "-04-" (4) keep the source's order.
    assert out_of_source_order([("14-04-03", "2003-04-14")]) == pytest.approx(0.5)
    # Pairs add up before the ratio: (1 + 4) kept of (3 + 8) shared.
    assert out_of_source_order([("abc", "cab"), ("14-04-03", "2003-04-14")]) == pytest.approx(
        1 - 6 / 11)
    assert out_of_source_order([("abc", "xyz")]) == 0.0  # nothing shared


def test_only_a_low_monotonic_run_on_reordered_outputs_is_warned_about():
    from keras_seq import recipes
    from keras_seq.recipes.translation import MONOTONIC_FLOOR, MONOTONIC_ORDER_LIMIT
    from keras_seq.run_config import TrainingConfig

    recipe = recipes.get("dates")
    low, reordered = MONOTONIC_FLOOR - 0.01, MONOTONIC_ORDER_LIMIT
    for attention, exact_match, order, warned in (
            ("monotonic_bahdanau", low, reordered, True),
            ("monotonic_luong", MONOTONIC_FLOOR, reordered, False),  # not low
            ("monotonic_luong", low, reordered - 0.01, False),  # undertrained, in order
            ("bahdanau", 0.0, 0.5, False)):
        config = TrainingConfig(attention=attention)
        metrics = {"test_exact_match": exact_match, "out_of_source_order": order}
        assert bool(recipe.result_warnings(metrics, config)) == warned, (attention, exact_match)


@pytest.mark.parametrize("command", ["translate", "classify"])
def test_a_missing_input_file_is_one_line_naming_input(command, capsys, tmp_path):
    missing = tmp_path / "missing.txt"
    assert main([command, str(tmp_path / "no-run"), "--input", str(missing)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == (
        f"keras-seq {command}: the input file {missing} does not exist; --input takes a file "
        "of one text per line, or - for standard input\n")


def test_an_empty_prompt_is_an_argument_error_in_the_commands_words(capsys, tmp_path):
    with pytest.raises(SystemExit) as stop:
        main(["generate", str(tmp_path), "--prompt", ""])
    assert stop.value.code == 2
    usage, error = capsys.readouterr().err.splitlines()
    assert usage.startswith("usage: keras-seq generate [options] RUN_DIR")
    assert error == ("keras-seq generate: error: --prompt must hold at least one character "
                     "(generation continues it), got ''")


def test_help_argument_errors_and_missing_files_do_not_import_tensorflow(tmp_path):
    (tmp_path / "empty.tsv").write_text("")
    (tmp_path / "no-tab.tsv").write_text("a line without a tab\n")
    (tmp_path / "short.txt").write_text("abc")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "mine.txt").write_text("mine")
    script = (
        "import sys, os\n"
        f"os.chdir({str(tmp_path)!r})\n"
        "from keras_seq_command import main  # the console script's entry point\n"
        "for argv in (['--help'], ['train', '--help'], ['train', '--units', '0'],\n"
        "             ['translate', 'r', 'x', '--length-penalty', '1'],\n"
        "             ['train', '--task', 'lm', '--model', 'mingru', '--cell', 'gru'],\n"
        "             ['train', '--cell', 'no-such-cell'],\n"
        "             ['tune', '--cells', 'gru', 'no-such-cell'],\n"
        "             ['generate', 'no/such/run', '--prompt', ''],\n"
        "             ['train', '--model', 'transformer', '--attention', 'luong']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as exit_:\n"
        "        assert argv[-1] == '--help' or exit_.code == 2, argv\n"
        "for argv in (['translate', 'no/such/run', 'x'],\n"
        "             ['classify', 'no/such/run', 'x'], ['generate', 'no/such/run', '--prompt', 'a'],\n"
        "             ['tag', 'no/such/run', 'x'], ['train', '--task', 'tag', '--data', 'no-tab.tsv'],\n"
        "             ['translate', 'no/such/run', '--input', 'missing.txt'],\n"
        "             ['train', '--task', 'classify', '--data', 'no/such.tsv'],\n"
        "             ['train', '--data', 'no/such.tsv', '--test-size', '5'],\n"
        "             ['train', '--task', 'classify', '--data', 'empty.tsv'],\n"
        "             ['train', '--task', 'classify', '--data', 'no-tab.tsv'],\n"
        "             ['train', '--data', 'no-tab.tsv'],\n"
        "             ['train', '--task', 'lm', '--data', 'short.txt'],\n"
        "             ['export', 'no/such/run', 'out'], ['export', 'no/such/run', 'used'],\n"
        "             ['verify', 'no/such/export']):\n"
        "    assert main(argv) == 1, argv\n"
        "assert sorted(os.listdir('.')) == ['empty.tsv', 'no-tab.tsv', 'short.txt', 'used']\n"
        "print('IMPORTED', sorted(m for m in ('keras', 'tensorflow', 'jax', 'torch')\n"
        "                         if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert "IMPORTED []" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]




@pytest.mark.slow
def test_the_command_prints_no_tensorflow_log_lines_and_records_the_run_name(tmp_path,
                                                                           tiny_run_args):
    """The console script in a fresh process trains with an automatic name,
    a cell named explicitly (whose class the argument check reads, loading
    TensorFlow before the command runs). (The README's commands, export and
    verify among them, run the same way in tests/test_doc_snippets.py, which
    checks them for log lines too.)"""
    import shutil

    command = shutil.which("keras-seq")
    assert command, "the keras-seq console script is installed with the package"
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["KERAS_BACKEND"] = "tensorflow"
    done = subprocess.run([command, "train", "--cell", "gru", "--out", str(tmp_path / "runs"),
                           *tiny_run_args[:-2], "--verbose", "2"], capture_output=True,
                          text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not TENSORFLOW_LOG.search(done.stdout + done.stderr), done.stderr[-3000:]
    assert done.stdout.startswith("Strategy: ")
    (run_dir,) = (tmp_path / "runs").iterdir()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["config"]["name"] == run_dir.name
    assert run_dir.name.startswith("rnn-gru-")



def test_a_cell_argument_error_prints_one_clean_line():
    """``--cell`` with a model that has no cell: one line, and no TensorFlow
    start-up note (the check runs before Keras is imported)."""
    import shutil

    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["KERAS_BACKEND"] = "tensorflow"
    done = subprocess.run([shutil.which("keras-seq"), "train", "--model", "transformer",
                           "--cell", "gru"], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2
    assert not TENSORFLOW_LOG.search(done.stderr), done.stderr
    assert done.stderr.splitlines()[-1].startswith("keras-seq train: error: --cell gru chooses")


def test_the_lstm_family_is_the_registered_cells_of_two_states():
    from keras_seq import run_config
    from keras_seq.layers.recurrent import registry

    assert tuple(run_config.CELLS) == registry.cell_names()
    # The (h, c) cells take the LSTM family's defaults, whatever their name.
    lstm_family = {"lstm", "peephole", "coupled", "layernorm_lstm"}
    for cell in ("gru", "lstm", "peephole", "coupled", "simple", "layernorm_lstm", "mingru",
                 "minlstm"):
        assert registry.is_lstm_family(cell) == (cell in lstm_family), cell
        epochs = run_config.TrainingConfig(cell=cell).resolved().epochs
        assert epochs == (4 if cell in lstm_family else 2), cell


def test_export_prints_each_converter_warning_once_on_one_line(tmp_path, capsys, monkeypatch):
    import warnings

    import keras_seq.export

    note = ("convert_to_onnx: PeepholeLSTM 'encoder': the OpenVINO execution provider "
            "computes an LSTM node without its peepholes")

    def export_run(run_dir, out, **kwargs):
        # The same layer in two files (forward pass, encoder): one note.
        warnings.warn(note, UserWarning, stacklevel=2)
        warnings.warn(note, UserWarning, stacklevel=2)
        return {"onnx": os.path.join(str(out), "onnx", "seq2seq.onnx")}

    monkeypatch.setattr(keras_seq.export, "export_run", export_run)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.json").write_text("{}")  # a run folder, for the check
    capsys.readouterr()
    assert main(["export", str(tmp_path / "run"), str(tmp_path / "out"), "--formats", "onnx"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"keras-seq export: warning: {note}"]
    assert captured.out.startswith("onnx: ")
