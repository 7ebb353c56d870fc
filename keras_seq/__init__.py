"""keras-seq: sequence-model layers, models and deployment for Keras 3.

Public entry points are ``keras_seq.layers`` and ``keras_seq.models``;
``import keras_seq`` imports both, which registers every layer with Keras so
that ``keras.saving.load_model`` finds them in a ``.keras`` file (and Keras'
optimizers under the names that its PyTorch backend saves them by, so that a
file trained on PyTorch loads compiled on any backend; see
``keras_seq._cross_backend_optimizers``). The text
pipeline (``keras_seq.text``, its reserved token ids in the dependency-free
``keras_seq.reserved_tokens``), decoding (``keras_seq.decoding``), data
(``keras_seq.data``), training (``keras_seq.training``, the pipeline of
``keras-seq train``) and export (``keras_seq.export``) modules are imported on
demand so that ``import keras_seq`` stays cheap.

In the ``keras-seq`` command's own process the two are imported when first
used instead: Keras imports its backend, and the command parses its arguments
and prints ``--help`` before loading TensorFlow.
"""

import importlib
import os
import sys

__version__ = "0.1.0"

__all__ = ["layers", "models", "__version__"]


def _in_command_process() -> bool:
    """Whether this process is the ``keras-seq`` console script."""
    argv = getattr(sys, "argv", None) or [""]
    return os.path.splitext(os.path.basename(argv[0]))[0] == "keras-seq"


if _in_command_process():

    def __getattr__(name):
        if name in ("layers", "models"):
            return importlib.import_module(f"keras_seq.{name}")
        raise AttributeError(f"module 'keras_seq' has no attribute {name!r}")

else:
    from keras_seq import _cross_backend_optimizers, layers, models  # noqa: F401
