"""Library errors in the command's words (`keras_seq.cli.messages.command_message`).

The references: the flags and placeholders of each command's own ``--help``
(the parser), and the rule of tests/cli_errors.py, which tests/conftest.py
also applies to every error line the other tests make a command print.
"""

import pytest
from cli_errors import violations

from keras_seq.cli import build_parser
from keras_seq.cli.messages import command_message

_, SUBPARSERS = build_parser()

# The library's message -> what the command prints after "keras-seq <command>: ".
CASES = [
    ("train", "train: empty.tsv has no texts (one label<TAB>text per line).",
     "empty.tsv has no texts (one label<TAB>text per line)."),
    ("export", "export_run: /runs/out is not empty; choose a new folder, or pass --overwrite "
     "(overwrite=True) to replace it whole.",
     "/runs/out is not empty; choose a new folder, or pass --overwrite to replace it whole."),
    ("verify", "verify: out/manifest.json does not exist; `out_dir` must be a folder "
     "written by keras-seq export.",
     "out/manifest.json does not exist; OUT must be a folder written by keras-seq export."),
    ("classify", "classify_texts: runs/dates is a translation run, not a classifier (train "
     "one with task='classify'); use translate_texts (keras-seq translate).",
     "runs/dates is a translation run, not a classifier (train one with --task classify); "
     "use keras-seq translate."),
    ("export", "export_run: `beam_width` is for translation runs; received beam_width=4.",
     "--beam is for translation runs; received --beam 4."),
    ("train", "keras_seq.data.read_labelled: bad.tsv line 3 has no tab.",
     "bad.tsv line 3 has no tab."),
    ("train", "WordPieceTokenizer.from_corpus: `vocab_size` must be at least 40.",
     "--vocab-size must be at least 40."),
    # A file name that starts the message is the user's text: it stays.
    ("train", "empty.tsv: no line has a tab.", "empty.tsv: no line has a tab."),
    ("generate", "generate_text: the prompt '€€' has characters the run's vocabulary lacks: "
     "'€'.", "the prompt '€€' has characters the run's vocabulary lacks: '€'."),
]


@pytest.mark.parametrize("command, message, expected", CASES)
def test_library_messages_become_the_commands_words(command, message, expected):
    said = command_message(command, message, SUBPARSERS)
    assert said == expected
    assert violations(f"keras-seq {command}: {said}") == []


@pytest.mark.parametrize("line, broken", [
    ("keras-seq train: train: empty.tsv has no texts", "a second prefix"),
    ("keras-seq export: x is not empty; pass --overwrite (overwrite=True)", "keyword argument"),
    ("keras-seq verify: `out_dir` must be a folder", "backticks"),
    ("keras-seq classify: use translate_texts", "a Python name"),
    ("Traceback (most recent call last):", "does not start"),
])
def test_the_rule_finds_python_in_an_error_line(line, broken):
    assert any(broken in v for v in violations(line))
