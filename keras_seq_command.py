"""The ``keras-seq`` command's entry point (the console script).

The command checks its arguments and the files they name before it loads
TensorFlow: an argument error or a missing file is one line in well under a
second. Importing ``keras_seq`` imports its layers, and so Keras and
TensorFlow (importing the package is what registers its classes for
``.keras`` files). So this module puts the ``keras_seq`` package in place
with its ``__init__`` not yet run: the command line's own modules, and the
Keras-free modules they read (the options, the data readers, the folder
checks), import on their own; `keras_seq.cli.main` finishes the package's
import once the arguments are checked, before the command runs. In any
other process (``import keras_seq``, ``python -m keras_seq.cli``) the
package imports as usual.
"""

from __future__ import annotations

import gc
import importlib.util
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the ``keras-seq`` command (`keras_seq.cli.main`)."""
    finish_import = None
    if "keras_seq" not in sys.modules:
        spec = importlib.util.find_spec("keras_seq")
        package = importlib.util.module_from_spec(spec)
        sys.modules["keras_seq"] = package

        def finish_import():
            spec.loader.exec_module(package)

    from keras_seq.cli import main as command

    return command(argv, finish_import=finish_import)


def console() -> int:
    """The console script: `main` on ``sys.argv``, in a process that ends on return.

    Python's last collections at exit walk every object still alive, and
    TensorFlow and Keras leave about half a million after their import
    alone: ``keras-seq translate`` took 6.98 s with them, 6.12 s frozen
    (medians of five). Frozen objects are skipped; files are closed by then,
    atexit handlers still run, and objects without reference cycles are
    still freed. The package's other child processes (``python -m
    keras_seq.cli``, and the export workers, through
    `keras_seq._unused_imports.python_command`) end the same way.
    """
    status = main()
    gc.freeze()
    return status


if __name__ == "__main__":
    sys.exit(console())
