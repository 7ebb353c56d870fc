"""keras-seq: sequence-model layers, tasks and deployment for Keras 3.

``import keras_seq`` imports ``keras_seq.layers``, ``keras_seq.models`` and
``keras_seq.tasks``, which registers every layer and task with Keras so that
``keras.saving.load_model`` finds them in a ``.keras`` file (and Keras'
optimizers under the names that its PyTorch backend saves them by, so that a
file trained on PyTorch loads compiled on any backend; see
``keras_seq._cross_backend_optimizers``). The text pipeline
(``keras_seq.text``, its reserved token ids in the dependency-free
``keras_seq.reserved_tokens``), decoding (``keras_seq.decoding``), sampling
(``keras_seq.samplers``), data (``keras_seq.data``), training
(``keras_seq.training``, the pipeline of ``keras-seq train``) and export
(``keras_seq.export``) modules are imported on demand, so that
``import keras_seq`` stays cheap.

The ``keras-seq`` command checks its arguments before this module runs (see
the console script's module, ``keras_seq_command``).
"""

__version__ = "0.1.0"

__all__ = ["layers", "models", "tasks", "__version__"]

from keras_seq import _cross_backend_optimizers, layers, models, tasks  # noqa: E402,F401
