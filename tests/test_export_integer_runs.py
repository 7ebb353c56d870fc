"""``keras-seq export --quantize int8`` of a run, and ``keras-seq verify`` of it.

The runs are the stored release runs (tests/tasks/data/release_runs), copied,
but the classifier's, trained here to read 12 tokens; calibration reads each
run's training data again: the dates are generated, a language model's and a
classifier's data file is written beside them.
"""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from keras_seq.export import export_run, verify
from keras_seq.export.integer_tflite import float_ops

pytestmark = [pytest.mark.tensorflow_only, pytest.mark.slow]

RUNS = os.path.join(os.path.dirname(__file__), "tasks", "data", "release_runs")


def _run(name, tmp_path):
    return shutil.copytree(os.path.join(RUNS, name), tmp_path / name)


def _row(result, quantize):
    (row,) = [r for r in result["artifacts"] if r["quantize"] == quantize]
    return row


def _static_inputs(path):
    details = Interpreter(model_path=str(path)).get_input_details()
    return [tuple(int(n) for n in d["shape_signature"]) for d in details]


def _same_in_tflite_micro(path, feeds=None):
    """The file runs in TensorFlow Lite for Microcontrollers with LiteRT's
    outputs: its reference kernels round apart from LiteRT's optimized ones
    by an int8 step at times (measured: one, 1.4% of a step's output's
    range), so within 3% of each output's range; masks and ids the same.
    ``feeds``: by input name; zeros for the others."""
    micro = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    litert = Interpreter(model_path=str(path))
    runner = litert.get_signature_runner()
    details = runner.get_input_details()
    feeds = {name: np.asarray((feeds or {}).get(name, np.zeros(d["shape"])), d["dtype"])
             for name, d in details.items()}
    expected = runner(**feeds)
    order = [d["index"] for d in litert.get_input_details()]  # the file's input order
    interpreter = micro.Interpreter.from_file(str(path))
    for name, d in details.items():
        interpreter.set_input(feeds[name], order.index(d["index"]))
    interpreter.invoke()
    outputs = [d["index"] for d in litert.get_output_details()]
    for name, d in runner.get_output_details().items():
        got = interpreter.get_output(outputs.index(d["index"]))
        reference = expected[name]
        if reference.dtype.kind != "f":  # a mask, ids: the same
            np.testing.assert_array_equal(got, reference)
            continue
        assert np.abs(got - reference).max() <= 0.03 * np.abs(reference).max() + 1e-6, name


def test_a_translation_run_exports_int8_and_int16x8_that_verify_checks(tmp_path):
    """16x8 takes the token ids too (its quantizer's errors mended). Both
    run in TensorFlow Lite for Microcontrollers as in LiteRT."""
    run = _run("dates_gru_bahdanau", tmp_path)
    out = tmp_path / "out"
    written = export_run(run, out, formats=("tflite",), quantize=("int8", "int16x8"),
                         examples=20, calibration_examples=8)
    source_length = int(np.load(written["reference"])["source_ids"].shape[1])
    for mode in ("int8", "int16x8"):
        for key in (f"tflite_{mode}_encoder", f"tflite_{mode}_decoder_step"):
            with open(written[key], "rb") as f:
                assert float_ops(f.read()) == []  # every op an integer kernel
        assert _static_inputs(written[f"tflite_{mode}_encoder"]) == [(1, source_length)]
        source = np.load(written["reference"])["source_ids"][:1]
        _same_in_tflite_micro(written[f"tflite_{mode}_encoder"], {"source_ids": source})
        _same_in_tflite_micro(written[f"tflite_{mode}_decoder_step"])
    result = verify(out)
    for mode, least in (("int8", 0.95), ("int16x8", 0.99)):
        row = _row(result, mode)
        assert row["string_match"] >= least and "QUANTIZE" in row["ops"], row
    assert result["passed"], result["failures"]


def test_a_language_model_run_exports_an_int8_step(tmp_path, monkeypatch):
    """MinGRU blocks: the int8 step runs in TensorFlow Lite for
    Microcontrollers too (its GELU a table); the 16x8 one's int16 GELU has
    no kernel there."""
    run = _run("lm_mingru", tmp_path)
    monkeypatch.chdir(tmp_path)  # the run's data file, text.txt, read again here
    with open("text.txt", "w", encoding="utf-8") as f:
        f.write("to be, or not to be, that is the question: whether 'tis nobler in the mind "
                "to suffer the slings and arrows of outrageous fortune\n" * 3)
    out = tmp_path / "out"
    written = export_run(run, out, formats=("tflite",), quantize=("int8", "int16x8"),
                         examples=5, calibration_examples=60)
    for mode in ("int8", "int16x8"):
        assert _static_inputs(written[f"tflite_{mode}"])[0] == (1,)  # one token, batch 1
        with open(written[f"tflite_{mode}"], "rb") as f:
            assert float_ops(f.read()) == []  # its norms' SQUAREs made integer MULs
    _same_in_tflite_micro(written["tflite_int8"], {"token": np.array([5], np.int32)})
    result = verify(out)
    for mode, least in (("int8", 0.95), ("int16x8", 0.99)):
        assert _row(result, mode)["token_agreement"] >= least, _row(result, mode)
    assert result["passed"], result["failures"]


def test_a_classifier_run_exports_int8_and_verify_reports_it(tmp_path, monkeypatch):
    """A run of its own that reads 12 tokens of a text (a release run reads
    256: its unrolled file took four times as long to convert)."""
    from keras_seq import training

    monkeypatch.chdir(tmp_path)
    with open("labelled.tsv", "w", encoding="utf-8") as f:  # its training data, read again
        for i in range(60):
            label = ("good", "bad", "meh")[i % 3]
            words = {"good": "fine great lovely", "bad": "awful poor sad",
                     "meh": "so so okay"}[label]
            f.write(f"{label}\tit was {words} number {i}\n")
    training.train(training.TrainingConfig(
        task="classify", data="labelled.tsv", units=8, epochs=1, max_source_length=12,
        out=str(tmp_path), name="classify", seed=0, verbose=0))
    out = tmp_path / "out"
    written = export_run(tmp_path / "classify", out, formats=("tflite",), quantize=("int8",),
                         examples=6, calibration_examples=6)
    assert _static_inputs(written["tflite_int8"]) == [(1, 12)]
    with open(written["tflite_int8"], "rb") as f:
        assert float_ops(f.read()) == []  # the padding mask's CAST made integer too
    _same_in_tflite_micro(written["tflite_int8"],
                          {"token_ids": np.arange(1, 13, dtype=np.int32)[None]})
    result = verify(out)
    row = _row(result, "int8")
    # A run of one epoch: its probabilities are near ties (its labels flip
    # under any rounding): the int8 file is within 0.02 of Keras' probabilities.
    assert row["max_abs_probability_error"] <= 0.02, row
    assert row["ops"] and "QUANTIZE" in row["ops"]
    if row["string_match"] < 0.95:
        assert any("tflite_int8" in f and "needs 95.0%" in f for f in result["failures"])


def test_calibration_data_that_is_gone_is_one_clear_error(tmp_path, monkeypatch):
    run = _run("lm_mingru", tmp_path)
    monkeypatch.chdir(tmp_path)  # no text.txt here
    with pytest.raises(ValueError, match="calibrates on the run's training data, which cannot "
                                         "be read again.*text.txt"):
        export_run(run, tmp_path / "out", formats=("tflite",), quantize=("int8",))
    assert not os.path.exists(tmp_path / "out")


def test_a_quantization_a_run_has_not_is_refused_first(tmp_path):
    with pytest.raises(ValueError, match="quantize"):
        export_run(_run("lm_mingru", tmp_path), tmp_path / "out", quantize=("int4",))


def test_the_command_line_takes_int8_int16x8_and_a_calibration_count():
    from keras_seq.cli.parser import build_parser

    parser, _ = build_parser()
    args = parser.parse_args(["export", "run", "out", "--quantize", "int8", "int16x8",
                              "--calibration-examples", "50"])
    assert args.quantize == ["int8", "int16x8"] and args.calibration_examples == 50
    done = subprocess.run([sys.executable, "-m", "keras_seq_command", "export", "run", "out",
                           "--calibration-examples", "0"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert "--calibration-examples must be positive" in done.stderr
    assert "Traceback" not in done.stderr
