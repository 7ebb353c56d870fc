"""keras-seq: sequence-model layers, models and deployment for Keras 3 on TensorFlow.

Public entry points are ``keras_seq.layers`` and ``keras_seq.models``; the text
pipeline (``keras_seq.text``, its reserved token ids in the dependency-free
``keras_seq.reserved_tokens``), decoding (``keras_seq.decoding``), data
(``keras_seq.data``), training (``keras_seq.training``, the pipeline of
``keras-seq train``) and export (``keras_seq.export``) modules are imported on
demand so that ``import keras_seq`` stays cheap.
"""

from keras_seq import layers, models

__version__ = "0.1.0"

__all__ = ["layers", "models", "__version__"]
