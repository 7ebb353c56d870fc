"""The packages TensorFlow's import loads for features the package's own
processes never use, left out of those processes.

Importing TensorFlow imports Keras; Keras imports scikit-learn (its
scikit-learn wrappers), matplotlib (its image plots) and IPython (its
notebook display), and TensorFlow's lite module imports JAX (the converter's
JAX input), each when installed and under ``try: ... except ImportError``.
With all four installed, importing TensorFlow took 6.59 CPU-seconds
here, 3.50 without them (medians of 5, `benchmarks/import_cost.py`), and
every ``keras-seq`` command, export worker and verify worker paid it. Two
ways to leave them out:

- `left_out`, while a block runs (the command line, while Keras imports):
  afterwards they import as usual, so that ``keras-seq tune``'s Bayesian
  tuner still imports scikit-learn, a run's attention plot matplotlib, a
  user's ``--import`` module what it needs; only those four features of
  Keras and TensorFlow stay off in that process;
- `python_command`, for a child process with one job (the integer
  quantizer's and ``verify``'s workers, the test suite's helper processes
  on TensorFlow): for its whole life.

Neither is for a user's process: ``import keras_seq`` leaves ``sys.modules``
alone. Keras-free, like the command line's first modules.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

__all__ = ["UNUSED_AT_IMPORT", "left_out", "python_command"]

UNUSED_AT_IMPORT = ("sklearn", "matplotlib", "jax", "IPython")


@contextlib.contextmanager
def left_out() -> Iterator[None]:
    """While the block runs, importing a package of `UNUSED_AT_IMPORT` not yet
    imported raises `ImportError` (a ``None`` in ``sys.modules``, Python's
    way); afterwards it imports as usual. For a block that imports Keras on
    TensorFlow: on JAX, Keras needs JAX."""
    absent = [name for name in UNUSED_AT_IMPORT if name not in sys.modules]
    for name in absent:
        sys.modules[name] = None
    try:
        yield
    finally:
        for name in absent:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


def python_command(*, module: str | None = None, path: str | None = None,
                   code: str | None = None) -> list[str]:
    """``[python, "-c", CODE]``: a Python that runs ``module`` (as ``python -m``
    would), the script at ``path`` (as ``python PATH`` would: its folder
    first on ``sys.path``) or the source ``code`` (as ``python -c`` would),
    with `UNUSED_AT_IMPORT` left out for good, and everything it leaves
    frozen (`gc.freeze`) once it has run: no collection at exit walks it
    (``keras_seq_command.console`` says why). Append the arguments; run it
    with ``KERAS_BACKEND=tensorflow``."""
    given = [value for value in (module, path, code) if value is not None]
    if len(given) != 1:
        raise TypeError("python_command: give one of module=, path= or code=")
    if module is not None:
        run = f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    elif path is not None:
        folder = os.path.dirname(os.path.abspath(path))
        run = f"sys.path[0] = {folder!r}\n    runpy.run_path({path!r}, run_name='__main__')"
    else:
        run = f"exec(compile({code!r}, '<string>', 'exec'))"
    bootstrap = (f"import gc, runpy, sys\n"
                 f"sys.modules.update(dict.fromkeys({UNUSED_AT_IMPORT!r}))\n"
                 f"try:\n    {run}\nfinally:\n    gc.freeze()\n")
    return [sys.executable, "-c", bootstrap]
