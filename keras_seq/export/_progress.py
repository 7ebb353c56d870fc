"""An export's progress: one line as each artifact starts, one when it is written."""

from __future__ import annotations

import contextlib
import sys
import time


class Progress:
    """Reports each artifact of an export on stderr, with its seconds.

    ``with progress.artifact("lm_stream.onnx"): ...`` prints ``export:
    lm_stream.onnx ...`` before the block and ``export: lm_stream.onnx in
    12.3 s`` after it, each line flushed as it is written, so that a
    terminal and a log file both show what the export is doing. Silent
    unless ``verbose``.
    """

    def __init__(self, verbose: bool = False, stream=None):
        self.verbose = verbose
        self.stream = stream

    @contextlib.contextmanager
    def artifact(self, name: str):
        if not self.verbose:
            yield
            return
        self._line(f"export: {name} ...")
        start = time.perf_counter()
        yield
        self._line(f"export: {name} in {time.perf_counter() - start:.1f} s")

    def _line(self, text: str) -> None:
        print(text, file=self.stream or sys.stderr, flush=True)
