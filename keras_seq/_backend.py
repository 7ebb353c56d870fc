"""The one check for the parts of keras_seq that run on the TensorFlow backend only.

The layers and model builders run on every Keras backend. Training
(`keras_seq.training`, `keras_seq.tuning`, `keras_seq.distribute`), decoding
(`keras_seq.decoding`, TensorFlow graph code for SavedModels), export
(`keras_seq.export`) and the ``keras-seq`` command need Keras on TensorFlow:
their public functions call `require_tensorflow` first, so that another
backend fails with one message that says how to get there, not with an error
from deep inside TensorFlow.
"""

from __future__ import annotations

# How to get to the TensorFlow backend, the end of the message.
CALL_THERE = "save the model as .keras, load it under TensorFlow and call it there"
EXPORT_THERE = "save the model as .keras, load it under TensorFlow and export there"
START_UNDER_TENSORFLOW = "start Python with KERAS_BACKEND=tensorflow"


def require_tensorflow(what: str, how: str = CALL_THERE) -> None:
    """Raises a `RuntimeError` naming ``what`` unless Keras runs on TensorFlow.

    Args:
        what: the function or command, e.g. ``"keras_seq.export.convert_to_tflite"``.
        how: how to get to the TensorFlow backend from here, the end of the
            message: `CALL_THERE` (default), `EXPORT_THERE` or
            `START_UNDER_TENSORFLOW`.

    Examples:
        >>> require_tensorflow("keras_seq.export.convert_to_tflite")  # on TensorFlow: nothing
    """
    import keras

    from keras_seq._validation import BackendError

    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise BackendError(
            None, f"{what} needs the TensorFlow backend (KERAS_BACKEND=tensorflow); Keras is "
            f"running on {backend!r}. To use it, {how}."
        )
