"""The packages left out of the package's own processes (keras_seq._unused_imports).

Whether a command's process loads them is checked where a command runs
(tests/test_export_language_model.py); the export and verify workers run in
every export test."""

import importlib
import json
import subprocess
import sys

import pytest

from keras_seq._unused_imports import UNUSED_AT_IMPORT, left_out, python_command

_REPORT = (
    "import json, sys\n"
    "refused = []\n"
    "for name in {names!r}:\n"
    "    try:\n"
    "        __import__(name)\n"
    "    except ImportError:\n"
    "        refused.append(name)\n"
    "print(json.dumps({{'argv': sys.argv[1:], 'refused': refused, 'name': __name__}}))\n"
)


def _report(command, tmp_path):
    done = subprocess.run([*command, "a b", "--c"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_script_runs_as_python_path_would_and_cannot_import_them(tmp_path):
    folder = tmp_path / "scripts"
    folder.mkdir()
    script = folder / "worker.py"
    script.write_text(_REPORT.format(names=[*UNUSED_AT_IMPORT, "beside"]))
    (folder / "beside.py").write_text("")  # the script's folder is first on sys.path
    report = _report(python_command(path=str(script)), tmp_path)
    assert report["argv"] == ["a b", "--c"]
    assert report["name"] == "__main__"
    assert report["refused"] == list(UNUSED_AT_IMPORT)


def test_a_module_runs_as_python_m_would(tmp_path, monkeypatch):
    package = tmp_path / "a_package"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "worker.py").write_text(_REPORT.format(names=["json", *UNUSED_AT_IMPORT]))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    report = _report(python_command(module="a_package.worker"), tmp_path)
    assert report["argv"] == ["a b", "--c"]
    assert report["name"] == "__main__"
    assert report["refused"] == list(UNUSED_AT_IMPORT)  # json imports


def test_code_runs_as_python_c_would(tmp_path):
    (tmp_path / "beside.py").write_text("")  # the working folder is first on sys.path
    code = "from __future__ import annotations\n" + _REPORT.format(
        names=["beside", *UNUSED_AT_IMPORT])
    report = _report(python_command(code=code), tmp_path)
    assert report["argv"] == ["a b", "--c"]
    assert report["name"] == "__main__"
    assert report["refused"] == list(UNUSED_AT_IMPORT)


def test_what_the_child_leaves_is_frozen_before_its_exit_handlers_run(tmp_path):
    """Python's collections at exit then skip it (an atexit handler runs after
    the bootstrap's ``finally``; the child's own objects are there to see)."""
    code = ("import atexit, gc\n"
            "kept = [[i] for i in range(1000)]\n"
            "atexit.register(lambda: print(gc.get_freeze_count() >= 1000, flush=True))\n"
            "print(gc.get_freeze_count(), flush=True)\n"
            "raise SystemExit(3)\n")
    done = subprocess.run(python_command(code=code), capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert done.stdout.split() == ["0", "True"]


def test_left_out_refuses_an_absent_one_in_the_block_only_and_keeps_a_loaded_one(
        tmp_path, monkeypatch):
    import keras_seq._unused_imports as unused

    (tmp_path / "probe_never_imported.py").write_text("VALUE = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(unused, "UNUSED_AT_IMPORT", ("probe_never_imported", "json"))
    loaded = sys.modules["json"]
    with left_out():
        with pytest.raises(ImportError):
            importlib.import_module("probe_never_imported")
        assert importlib.import_module("json") is loaded
    assert sys.modules["json"] is loaded
    assert importlib.import_module("probe_never_imported").VALUE == 3
    del sys.modules["probe_never_imported"]


def test_python_command_takes_one_of_a_module_a_path_or_code():
    for kwargs in ({}, {"module": "m", "path": "p"}, {"path": "p", "code": "pass"}):
        with pytest.raises(TypeError, match="python_command: give one of module=, path= or code="):
            python_command(**kwargs)
