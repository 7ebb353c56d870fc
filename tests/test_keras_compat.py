"""Drop-in: Keras' own GRU, LSTM and MultiHeadAttention test files pass against our layers.

Keras ships its tests inside the installed package. This test copies three of
them into a temporary directory with `keras_compat/substitute_layers.py` as
their `conftest.py` (it puts `keras_seq.layers.GRU`, `GRUCell`,
`MultiHeadAttention` and a `PeepholeLSTM` with zero peepholes in place of
Keras' classes) and runs them with pytest in a subprocess.

The only difference expected is `LSTMTest::test_basics` (an xfail declared in
the conftest: `PeepholeLSTM` has 3 peephole weights more). The minimum
numbers of passed tests catch a Keras upgrade that drops or renames tests.
"""

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import keras
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SUBSTITUTE_CONFTEST = Path(__file__).resolve().parent / "keras_compat" / "substitute_layers.py"

# Copied name -> path under keras/src/.
KERAS_TEST_FILES = {
    "gru_test.py": "layers/rnn/gru_test.py",
    "lstm_test.py": "layers/rnn/lstm_test.py",
    "multi_head_attention_test.py": "layers/attention/multi_head_attention_test.py",
}

# Passed tests with Keras 3.15.1 (skips are Keras' own: flash attention and
# torch-only paths).
MIN_PASSED = {
    "gru_test.py": 9,
    "lstm_test.py": 5,
    "multi_head_attention_test.py": 48,
}
EXPECTED_XFAIL = {"lstm_test.py::LSTMTest::test_basics"}

TIMEOUT_S = 900


def _outcomes(junit_xml: Path) -> dict[str, tuple[str, str]]:
    """node id -> (outcome, message) from pytest's JUnit XML report."""
    outcomes = {}
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        module, _, cls = case.get("classname", "").partition(".")
        node_id = (
            f"{module}.py::{cls}::{case.get('name')}" if cls else f"{module}.py::{case.get('name')}"
        )
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
    keras_src = Path(keras.__file__).resolve().parent / "src"
    for copy_name, relative in KERAS_TEST_FILES.items():
        source = keras_src / relative
        assert source.is_file(), f"Keras {keras.__version__} no longer ships {source}"
        shutil.copy(source, tmp_path / copy_name)
    shutil.copy(SUBSTITUTE_CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    report = tmp_path / "report.xml"

    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
        "--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini"),
        f"--junitxml={report}", *KERAS_TEST_FILES,
    ]  # fmt: skip
    result = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert report.is_file(), (
        f"pytest produced no report:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    outcomes = _outcomes(report)

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
