"""One process at a time in a run or export folder (`training.locking`):
a second `train`, `tune` or `export` into a folder in use refuses in one
line naming the other process, and a finished run is never replaced
without ``--fresh``."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from keras_seq.cli import main
from keras_seq.training import locking

# Holds the lock of argv[1] until its standard input closes; loads the
# module from its file, so that the holder starts without TensorFlow.
_HOLDER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("folder_lock", sys.argv[2])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
with module.folder_lock(sys.argv[1], "train"):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.fixture
def holder():
    """``holder(folder)``: a process that holds ``folder``'s lock; killed at the end."""
    started = []

    def start(folder):
        process = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(folder), locking.__file__],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        started.append(process)
        assert process.stdout.readline().strip() == "held"
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()


def _one_line(capsys):
    """The refusal's one line on stderr; nothing on stdout before it."""
    out, err = capsys.readouterr()
    assert out == "", out
    err = err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_tune_and_export_into_a_folder_in_use_refuse_naming_its_process(
    tiny_date_run, tmp_path, capsys, holder
):
    process = holder(tmp_path / "runs" / "search")
    assert main(["tune", "--out", str(tmp_path / "runs"), "--name", "search",
                 "--trials", "1", "--epochs", "1"]) == 1
    message = _one_line(capsys)
    assert message.startswith("keras-seq tune: ")
    assert f"in use by process {process.pid} (train)" in message
    assert not (tmp_path / "runs" / "search").exists()

    out = tmp_path / "export"
    process = holder(out)
    assert main(["export", tiny_date_run.run_dir, str(out), "--formats", "savedmodel"]) == 1
    assert f"in use by process {process.pid}" in _one_line(capsys)
    assert not out.exists()


def test_a_killed_holder_leaves_no_lock(tmp_path, holder):
    folder = tmp_path / "run"
    process = holder(folder)
    with pytest.raises(locking.FolderInUseError, match=f"process {process.pid} "):
        with locking.folder_lock(folder, "train"):
            pass
    process.send_signal(signal.SIGKILL)
    process.wait()
    with locking.folder_lock(folder, "export"):
        pass
    assert os.listdir(tmp_path) == []  # the lock file goes with its last holder


def test_tune_refuses_a_finished_run_without_fresh(tiny_date_run, capsys):
    run_dir = Path(tiny_date_run.run_dir)
    before = (run_dir / "metrics.json").read_bytes()
    assert main(["tune", "--out", str(run_dir.parent), "--name", run_dir.name,
                 "--trials", "1"]) == 1
    message = _one_line(capsys)
    assert "already holds a finished run" in message and "pass --fresh" in message
    assert (run_dir / "metrics.json").read_bytes() == before


def test_train_refuses_a_finished_run_with_nothing_on_stdout_first(tiny_date_run, capsys):
    """(It printed its "Strategy: ..." line before the refusal.)"""
    run_dir = Path(tiny_date_run.run_dir)
    assert main(["train", "--out", str(run_dir.parent), "--name", run_dir.name]) == 1
    assert "already holds a finished run" in _one_line(capsys)


@pytest.mark.slow
def test_a_second_train_into_a_running_run_refuses_and_the_first_finishes(
    tmp_path, capsys, tiny_run_args
):
    """The race of two ``keras-seq train --out runs --name SAME`` a moment apart."""
    command = shutil.which("keras-seq")
    run = ["train", "--out", str(tmp_path), "--name", "same", *tiny_run_args]
    first = subprocess.Popen([command, *run, "--epochs", "3"], stderr=subprocess.PIPE,
                             text=True, env={**os.environ, "KERAS_BACKEND": "tensorflow"})
    lock = tmp_path / ".same.lock"
    deadline = time.monotonic() + 300
    while not lock.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lock.exists(), "the first run never took its folder's lock"
    assert main(run) == 1
    message = _one_line(capsys)
    assert message.startswith("keras-seq train: ")
    assert f"in use by process {first.pid} (train)" in message
    assert first.wait(timeout=600) == 0, first.stderr.read()[-3000:]
    metrics = json.loads((tmp_path / "same" / "metrics.json").read_text())
    assert metrics["config"]["epochs"] == 3  # the first run's, not replaced
    assert main(run) == 1
    assert "already holds a finished run" in _one_line(capsys)
    assert not lock.exists()
