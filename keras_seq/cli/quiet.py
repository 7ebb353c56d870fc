"""Keras imported for a command: without TensorFlow's C++ start-up notes on
stderr (the commands' output is theirs alone), and without the packages its
import loads for features no command uses (`keras_seq._unused_imports`)."""

from __future__ import annotations

import contextlib
import os
import re
import sys

from keras_seq._stderr import stderr_passed_on
from keras_seq._unused_imports import left_out

__all__ = ["import_keras_quietly", "tensorflow_notes_dropped"]

# TensorFlow's C++ start-up notes: absl-format INFO/WARNING lines
# ("I0000 00:00:1795580816.342428  18897 cudart_stub.cc:31] ..."), absl's
# banner before them, the second line of cpu_feature_guard's note, and the
# CUDA probe's error on a machine without a GPU. Some are written before
# TF_CPP_MIN_LOG_LEVEL is read, the last whatever it says.
_TENSORFLOW_NOTE = re.compile(
    r"^([IW]\d{4} [\d:.]+\s+\d+ \S+:\d+\] |E\d{4} [\d:.]+\s+\d+ cuda\w*\.cc:\d+\] "
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|To enable the following instructions: )"
)


def import_keras_quietly() -> None:
    """Imports Keras (and so its backend, TensorFlow) as `tensorflow_notes_dropped`
    says: its C++ start-up notes dropped from stderr (anything else it writes
    there is kept), the packages it would load for nothing left out."""
    if "keras" in sys.modules:
        return
    with tensorflow_notes_dropped():
        import keras  # noqa: F401


@contextlib.contextmanager
def tensorflow_notes_dropped():
    """The block's stderr with TensorFlow's C++ start-up notes dropped (the
    rest is kept): for a block that may import Keras, and so TensorFlow, or
    may fail before (a check that reads a cell's class only when the other
    options are valid). When the block imported Keras, TensorFlow's CUDA
    probe runs in it too, whose error line a machine without a GPU gets.
    Where the block is the first to import Keras, on TensorFlow, it runs
    with `keras_seq._unused_imports.left_out`."""
    imported = "keras" in sys.modules
    # The command sets KERAS_BACKEND; on another backend Keras may need JAX
    # (and the command stops once Keras is imported).
    lean = not imported and os.environ.get("KERAS_BACKEND") == "tensorflow"
    with stderr_passed_on(lambda line: not _TENSORFLOW_NOTE.match(line)), \
            (left_out() if lean else contextlib.nullcontext()):
        yield
        if not imported and "keras" in sys.modules:
            import keras

            if keras.backend.backend() == "tensorflow":
                import tensorflow as tf

                # The CUDA probe. The physical devices: listing the logical
                # ones would start TensorFlow's runtime, after which a
                # multi-worker strategy cannot configure its collectives.
                tf.config.list_physical_devices()
