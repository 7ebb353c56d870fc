"""The process's stderr (file descriptor 2) held back while a block runs.

TensorFlow's C++ code writes its notes and diagnostics to the descriptor
itself, past Python's ``sys.stderr``: the command line drops its start-up
notes (`keras_seq.cli.quiet`) and `convert_to_tflite` a failed
conversion's pages of MLIR (`keras_seq.export._tflite_converter`). No
TensorFlow here: the command line imports this before it loads anything.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def stderr_passed_on(keep: Callable[[str], bool]) -> Iterator[None]:
    """Holds back what the block writes to stderr, then writes the lines
    ``keep`` selects (each with its line end) to ``sys.stderr``, also when
    the block raises."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode("utf-8", "replace").splitlines(keepends=True):
                if keep(line):
                    sys.stderr.write(line)
