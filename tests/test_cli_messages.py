"""Library errors in two languages: Python's for a caller of the library, the
command's flags for the command line (`keras_seq.cli.words.CommandWords`).

The library keeps a message's arguments, values and functions as parts
(`keras_seq._validation.Arg`, `Value`, `Call`); ``str(error)`` says them
the Python way, and the command line renders them from the flags its own
parser defined: no message is rewritten. References: each command's
``--help`` (the parser's flags), the rule of tests/cli_errors.py, and a
library message that must name no flag.
"""

import subprocess
import sys

import pytest
from cli_errors import violations

from keras_seq._validation import (
    Arg,
    ArgumentValueError,
    Call,
    ExistingFileError,
    MissingFileError,
    Value,
)
from keras_seq.cli import build_parser, failure_line
from keras_seq.cli.words import CommandWords

_, SUBPARSERS = build_parser()
FLAGS = {name: parser.flags for name, parser in SUBPARSERS.items()}

# (command, error, what Python says, what the command says after "keras-seq <command>: ").
CASES = [
    ("export", ExistingFileError("export_run", "/runs/out is not empty; choose a new folder, "
                                 "or pass ", Arg("overwrite", True), " to replace it whole."),
     "export_run: /runs/out is not empty; choose a new folder, or pass overwrite=True to "
     "replace it whole.",
     "/runs/out is not empty; choose a new folder, or pass --overwrite to replace it whole."),
    ("verify", MissingFileError("verify", "out/manifest.json does not exist; ", Arg("out_dir"),
                                " must be a folder written by ", Call("export_run"), "."),
     "verify: out/manifest.json does not exist; `out_dir` must be a folder written by "
     "export_run.",
     "out/manifest.json does not exist; OUT must be a folder written by keras-seq export."),
    ("classify", ArgumentValueError("classify_texts", "runs/dates holds a translation model (",
                                    Arg("task", "dates"), "), not a text classifier; use ",
                                    Call("translate_texts"), "."),
     "classify_texts: runs/dates holds a translation model (task='dates'), not a text "
     "classifier; use translate_texts.",
     "runs/dates holds a translation model (--task dates), not a text classifier; use "
     "keras-seq translate."),
    ("tag", ArgumentValueError("tag_texts", "runs/c holds a text classifier (",
                               Arg("task", "classify"), "); use ", Call("classify_texts"), "."),
     "tag_texts: runs/c holds a text classifier (task='classify'); use classify_texts.",
     "runs/c holds a text classifier (--task classify); use keras-seq classify."),
    ("export", ArgumentValueError("export_run", Arg("beam_width"), " is for translation runs; "
                                  "received ", Arg("beam_width", 4), "."),
     "export_run: `beam_width` is for translation runs; received beam_width=4.",
     "--beam is for translation runs; received --beam 4."),
    ("train", ArgumentValueError("TrainingConfig", Arg("lm_weight", 0.5), " is an option of ",
                                 Arg("task", "classify"), "; received ", Arg("task", "dates"),
                                 "."),
     "TrainingConfig: lm_weight=0.5 is an option of task='classify'; received task='dates'.",
     "--lm-weight 0.5 is an option of --task classify; received --task dates."),
    ("train", ArgumentValueError("TrainingConfig", "the backup was written by a run with "
                                 "other options (", Arg("num_layers"), ", ", Arg("text_file"),
                                 "); pass ", Arg("fresh", True), " to start over."),
     "TrainingConfig: the backup was written by a run with other options (`num_layers`, "
     "`text_file`); pass fresh=True to start over.",
     "the backup was written by a run with other options (--layers, --data); pass --fresh to "
     "start over."),
    ("generate", ArgumentValueError("generate_text", "the prompt '€€' has characters the run's "
                                    "vocabulary lacks: ", Value("€"), "."),
     "generate_text: the prompt '€€' has characters the run's vocabulary lacks: '€'.",
     "the prompt '€€' has characters the run's vocabulary lacks: €."),
]


@pytest.mark.parametrize("command, error, python, said", CASES)
def test_an_error_speaks_python_to_the_library_and_flags_to_the_command(command, error, python,
                                                                        said):
    assert str(error) == python
    line = failure_line(command, error, CommandWords(command, FLAGS))
    assert line == f"keras-seq {command}: {said}"
    assert violations(line) == []


def test_an_argument_is_the_flag_or_placeholder_of_the_commands_parser():
    train, export = CommandWords("train", FLAGS), CommandWords("export", FLAGS)
    assert train.flag("batch_size") == "--batch-size" == FLAGS["train"]["batch_size"]
    assert train.flag("num_layers") == "--layers"  # the library's name for it (ALIASES)
    # A command's own flag first: OUT is export's folder, --out train's.
    assert export.flag("out_dir") == export.flag("out") == "OUT"
    assert train.flag("out") == "--out"
    assert export.flag("task") == "--task"  # another command's flag, named in a message


def test_no_library_message_names_a_flag():
    """The library's sources name no ``--flag`` in an error: only keras_seq.cli does."""
    done = subprocess.run(
        [sys.executable, "-c",
         "import pathlib, re, keras_seq_command\n"
         "root = pathlib.Path(keras_seq_command.__file__).parent / 'keras_seq'\n"
         "for path in sorted(root.rglob('*.py')):\n"
         "    if 'cli' in path.parts: continue\n"
         "    text = path.read_text()\n"
         "    for m in re.finditer(r'raise [A-Za-z]+\\((?:[^()]|\\([^()]*\\))*\\)', text):\n"
         "        if re.search(r'[\"\\'][^\"\\']*--[a-z][a-z-]+', m.group(0)):\n"
         "            print(path.name, m.group(0)[:120].replace('\\n', ' '))\n"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "", done.stdout


@pytest.mark.parametrize("line, broken", [
    ("keras-seq train: train: empty.tsv has no texts", "a second prefix"),
    ("keras-seq export: x is not empty; pass --overwrite (overwrite=True)", "keyword argument"),
    ("keras-seq verify: `out_dir` must be a folder", "backticks"),
    ("keras-seq classify: use translate_texts", "a Python name"),
    ("Traceback (most recent call last):", "does not start"),
])
def test_the_rule_finds_python_in_an_error_line(line, broken):
    assert any(broken in v for v in violations(line))


# ---------------------------------------------------------------------------
# One line, or the traceback


def test_an_error_raised_on_purpose_is_one_line_and_debug_shows_its_traceback(
        tmp_path, capsys, monkeypatch):
    from keras_seq.cli import main

    missing = str(tmp_path / "no-such-run")
    assert main(["translate", missing, "x"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and missing in err
    # --debug, before or after the command, or the environment variable: the exception itself.
    for argv in (["--debug", "translate", missing, "x"], ["translate", missing, "x", "--debug"]):
        with pytest.raises(FileNotFoundError, match="no-such-run"):
            main(argv)
    monkeypatch.setenv("KERAS_SEQ_DEBUG", "1")
    with pytest.raises(FileNotFoundError):
        main(["translate", missing, "x"])


def test_an_unexpected_error_keeps_its_traceback(monkeypatch):
    """A failure nobody raised on purpose (a bug) is not turned into one line."""
    from keras_seq import cli

    def check(args):
        raise KeyError("a bug")

    monkeypatch.setitem(cli.COMMANDS, "translate", (check, cli.COMMANDS["translate"][1]))
    with pytest.raises(KeyError, match="a bug"):
        cli.main(["translate", "run", "x"])
