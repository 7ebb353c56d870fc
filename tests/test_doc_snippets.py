"""Every code block of the README and of the docs' getting-started page and
guides runs, as written, so that no snippet drifts from the code.

Each page runs in a fresh folder, its ```python and ```bash blocks in order:
each bash block in a process of its own, and each run of consecutive python
blocks in one Python process (as a reader pastes a guide's steps into one
session: a later block may use what an earlier one defined). Two comments
in the Markdown, on the line before a block, change what runs; both are
explained in tests/README.md:

- ``<!-- snippet: skip: REASON -->``: the block is not run (installs and
  the test suite itself);
- ``<!-- snippet: args: "PREFIX" ARGS -->``: every line of the block that
  starts with ``PREFIX`` runs with ``ARGS`` appended (a long training run,
  made tiny; the other lines run as written).

A ```text block is output or a file layout, never run.

The README, the getting-started page and the phone guide train the same
tiny run (`keras-seq train --name dates` with the same ``args``): a
`keras-seq train` line that an earlier page of the session ran word for word
is not run again; its run folder is copied from that page (`_TrainedRuns`).
"""

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from tensorflow_log import TENSORFLOW_LOG

from keras_seq._unused_imports import python_command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Two files share the pages (this one and test_doc_snippets_guides.py), so
# that the suite's two TensorFlow workers share the minutes they take.
PAGES = ["README.md", "docs/index.md", "docs/guides/streaming.md"]
GUIDES = ["docs/guides/translator.md", "docs/guides/phone.md", "docs/guides/backends.md",
          "docs/guides/write_your_own_cell.md", "docs/guides/classify.md"]
RUN = {"python", "bash"}
SHOWN = {"text"}
_FENCE = re.compile(r"^```(\w*)\s*$")
_MARKER = re.compile(r"^<!--\s*snippet:\s*(skip|args):\s*(.*?)\s*-->\s*$")


def blocks(path):
    """``[(language, code, marker)]`` of the top-level fenced blocks of a page;
    ``marker`` is ``(kind, value)`` from a snippet comment right above it."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().splitlines()
    found, marker, i = [], None, 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        comment = _MARKER.match(lines[i])
        if comment:
            marker = (comment.group(1), comment.group(2))
        elif fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            found.append((fence.group(1), "\n".join(lines[i + 1 : end]) + "\n", marker))
            marker, i = None, end
        elif lines[i].strip():
            marker = None  # a comment applies to the block right below it only
        i += 1
    return found


def _with_args(code, value):
    prefix, args = re.fullmatch(r'"([^"]+)"\s+(.+)', value).groups()
    return "\n".join(
        f"{line} {args}" if line.startswith(prefix) else line for line in code.splitlines()
    ) + "\n"


@pytest.mark.parametrize("page", PAGES + GUIDES)
def test_every_block_is_python_bash_or_text_and_every_skip_says_why(page):
    for language, code, marker in blocks(page):
        assert language in RUN | SHOWN, f"{page}: a block marked {language!r}:\n{code}"
        if marker is not None:
            kind, value = marker
            assert language in RUN, f"{page}: a snippet comment above a {language} block"
            if kind == "skip":
                assert len(value) > 10, f"{page}: a skip without its reason"
            else:
                assert any(line.startswith(value.split('"')[1])
                           for line in code.splitlines()), f"{page}: args for no line"


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_page_code_blocks_run_as_written(page, tmp_path, tmp_path_factory):
    run_page(page, tmp_path, _TrainedRuns(tmp_path_factory))


class _TrainedRuns:
    """The run folders of the session's `keras-seq train` lines, by line.

    Kept beside the session's temporary folders, shared by the pytest
    workers; a folder is stored whole (copied, then renamed into place).
    """

    def __init__(self, tmp_path_factory):
        self.root = tmp_path_factory.getbasetemp().parent / "snippet-runs"
        self.root.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def run_folder(line):
        """The run folder a ``keras-seq train`` line writes (``--out``/``--name``)."""
        words = shlex.split(line)
        options = dict(zip(words, words[1:]))
        return os.path.join(options.get("--out", "runs"), options["--name"])

    def stored(self, line):
        return self.root / hashlib.sha1(line.encode()).hexdigest()

    def replay(self, code, folder):
        """``code`` with each train line already run elsewhere replaced by a
        copy of its run folder into ``folder``; and the train lines to store."""
        lines, to_store = [], []
        for line in code.splitlines():
            if line.startswith("keras-seq train ") and "--name" in line:
                stored = self.stored(line)
                if stored.is_dir():
                    target = os.path.join(folder, self.run_folder(line))
                    shutil.copytree(stored, target)
                    continue
                to_store.append(line)
            lines.append(line)
        return "\n".join(lines) + "\n", to_store

    def store(self, line, folder):
        stored = self.stored(line)
        if stored.is_dir():
            return
        partial = stored.with_suffix(f".{os.getpid()}")
        shutil.copytree(os.path.join(folder, self.run_folder(line)), partial)
        try:
            os.rename(partial, stored)
        except OSError:  # another worker stored it first
            shutil.rmtree(partial, ignore_errors=True)


def run_page(page, folder, trained_runs):
    """Runs the blocks of ``page`` in order in ``folder``; fails on the first that fails."""
    env = {
        **os.environ,
        "KERAS_BACKEND": "tensorflow",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        # The checkout under test, also where it is not the installed one.
        "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]),
    }
    runs = []  # (language, code): consecutive python blocks joined
    for language, code, marker in blocks(page):
        if language not in RUN or (marker and marker[0] == "skip"):
            continue
        if marker:
            code = _with_args(code, marker[1])
        if language == "python" and runs and runs[-1][0] == "python":
            runs[-1] = ("python", runs[-1][1] + "\n" + code)
        else:
            runs.append((language, code))
    for language, code in runs:
        to_store = []
        block_env = env
        # A block of commands alone runs as a user runs them, without
        # TF_CPP_MIN_LOG_LEVEL: the commands must print no TensorFlow log line.
        commands_only = language == "bash" and "python" not in code
        if language == "bash":
            code, to_store = trained_runs.replay(code, folder)
        if commands_only:
            block_env = {k: v for k, v in env.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
        # A Python block runs as ``python -c`` would, without the packages
        # TensorFlow's import loads for features no block uses (3 CPU-s
        # each time; keras_seq._unused_imports).
        command = python_command(code=code) if language == "python" else [
            "bash", "-e", "-o", "pipefail", "-c", code]
        done = subprocess.run(command, cwd=folder, env=block_env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, (
            f"{page}: this block failed:\n{code}\n--- stdout\n{done.stdout[-2000:]}"
            f"\n--- stderr\n{done.stderr[-4000:]}"
        )
        if commands_only:
            assert not TENSORFLOW_LOG.search(done.stderr), f"{page}:\n{code}\n{done.stderr}"
        for line in to_store:
            trained_runs.store(line, folder)
    assert runs, f"{page} has no block to run"


def test_args_marker_appends_to_matching_lines_only():
    code = "keras-seq train --name x\necho keras-seq train\n"
    assert _with_args(code, '"keras-seq train" --epochs 1') == (
        "keras-seq train --name x --epochs 1\necho keras-seq train\n"
    )
