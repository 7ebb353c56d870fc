"""Drop-in: Keras' own GRU, LSTM, RNN, StackedRNNCells and MultiHeadAttention
tests pass against our layers.

Keras ships its tests inside the installed package. This test runs five of
them, as installed (``pytest --pyargs``), in a subprocess with
`keras_compat/substitute_layers.py` as a plugin: it puts
`keras_seq.layers.GRU`, `GRUCell`, `MultiHeadAttention`, `RNN` and a
`PeepholeLSTM` with zero peepholes in place of Keras' classes, and reports
that they stayed in place to the end.

The only difference expected is `LSTMTest::test_basics` (an xfail declared in
the plugin: `PeepholeLSTM` has 3 peephole weights more). The minimum
numbers of passed tests catch a Keras upgrade that drops or renames tests.
"""

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import keras
import pytest

from keras_seq._unused_imports import python_command

REPO_ROOT = Path(__file__).resolve().parent.parent
PLUGIN_DIR = Path(__file__).resolve().parent / "keras_compat"

# Keras' test modules, by import path.
KERAS_TEST_MODULES = [
    "keras.src.layers.rnn.gru_test",
    "keras.src.layers.rnn.lstm_test",
    "keras.src.layers.rnn.rnn_test",
    "keras.src.layers.rnn.stacked_rnn_cells_test",
    "keras.src.layers.attention.multi_head_attention_test",
]

# Passed tests with Keras 3.15.1 (skips are Keras' own: flash attention and
# torch-only paths).
MIN_PASSED = {
    "gru_test.py": 9,
    "lstm_test.py": 5,
    "rnn_test.py": 14,
    "stacked_rnn_cells_test.py": 7,
    "multi_head_attention_test.py": 48,
}
EXPECTED_XFAIL = {"lstm_test.py::LSTMTest::test_basics"}
SUBSTITUTED = ["GRU", "GRUCell", "LSTM", "MultiHeadAttention", "RNN"]

TIMEOUT_S = 900


def _outcomes(junit_xml: Path) -> dict[str, tuple[str, str]]:
    """``file.py::Class::test`` -> (outcome, message) from pytest's JUnit XML
    report (xunit1: each case names its file)."""
    outcomes = {}
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        module = Path(case.get("file", "")).name
        cls = case.get("classname", "").rpartition(".")[2]
        node_id = f"{module}::{cls}::{case.get('name')}" if cls else f"{module}::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message = "failed", child.get("message", "")
            elif child.tag == "skipped":
                xfail = child.get("type") == "pytest.xfail"
                outcome, message = ("xfailed" if xfail else "skipped"), child.get("message", "")
        outcomes[node_id] = outcome, message
    return outcomes


@pytest.mark.slow
def test_keras_own_test_files_pass_against_keras_seq_layers(tmp_path):
    for module in KERAS_TEST_MODULES:
        path = Path(keras.__file__).resolve().parent.joinpath(*module.split(".")[1:])
        assert path.with_suffix(".py").is_file(), f"Keras {keras.__version__} no longer ships {module}"
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    report = tmp_path / "report.xml"
    substituted = tmp_path / "substituted.json"

    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2",
               KERAS_SEQ_SUBSTITUTED=str(substituted))
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), str(PLUGIN_DIR), env.get("PYTHONPATH")]))
    command = [
        *python_command(module="pytest"), "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
        "-p", "substitute_layers", "-o", "junit_family=xunit1",
        "--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini"),
        f"--junitxml={report}", "--pyargs", *KERAS_TEST_MODULES,
    ]  # fmt: skip
    result = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert report.is_file(), (
        f"pytest produced no report:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    outcomes = _outcomes(report)
    assert json.loads(substituted.read_text()) == SUBSTITUTED

    failed = {
        node_id: message
        for node_id, (outcome, message) in outcomes.items()
        if outcome == "failed"
    }
    assert not failed, "Keras' tests failed against keras_seq's layers:\n" + "\n".join(
        f"  {node_id}: {message[:300]}" for node_id, message in sorted(failed.items())
    )
    xfailed = {node_id for node_id, (outcome, _) in outcomes.items() if outcome == "xfailed"}
    assert xfailed == EXPECTED_XFAIL

    for file_name, minimum in MIN_PASSED.items():
        passed = sorted(
            node_id
            for node_id, (outcome, _) in outcomes.items()
            if outcome == "passed" and node_id.startswith(file_name + "::")
        )
        assert len(passed) >= minimum, (
            f"only {len(passed)} of Keras' tests in {file_name} passed (expected at least "
            f"{minimum}): did a Keras upgrade change them? Passed: {passed}"
        )
