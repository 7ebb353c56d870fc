"""ONNX through tf2onnx: any model or function, and translation models.

Recurrent layers that ONNX's own operators express become one ``LSTM``,
``GRU`` or ``RNN`` node each (`keras_seq.export.onnx_recurrent`); the rest of
the graph, and every other recurrent layer's ``Loop``, is tf2onnx's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from keras_seq._backend import EXPORT_THERE, require_tensorflow
from keras_seq._validation import (
    ArgumentValueError,
    check_positive_int,
    invalid_type,
    invalid_value,
)
from keras_seq.export._checks import check_seq2seq
from keras_seq.export._tracing import (
    decoder_step_functions,
    models_of,
    seq2seq_forward,
    seq2seq_signature,
    traceable,
)
from keras_seq.export.onnx_recurrent import NativeRecurrence

_DEFAULT_OPSET = 17
# The values of `native_recurrent` (see `convert_to_onnx`).
NATIVE_RECURRENT = (True, False, "portable")


def convert_to_onnx(
    model,
    path: str | os.PathLike,
    input_signature: Sequence[tf.TensorSpec] | None = None,
    opset: int = _DEFAULT_OPSET,
    native_recurrent: bool | str = True,
) -> str:
    """Converts a Keras model (or any callable) to ONNX with tf2onnx.

    The function is traced with ``training=False`` and its weights frozen.
    Every recurrent layer that ONNX's operators express becomes one node:
    `PeepholeLSTM`, `CoupledGateLSTM` (``input_forget=1``) and Keras' ``LSTM``
    / `ConvertibleLSTM` an ``LSTM``, `GRU` and Keras' ``GRU`` a ``GRU``
    (``linear_before_reset`` = ``reset_after``), Keras' ``SimpleRNN`` /
    `ConvertibleSimpleRNN` an ``RNN``; a ``keras.layers.Bidirectional`` of one
    of them one node with ``direction="bidirectional"``. ``go_backwards``,
    ``return_sequences``, ``return_state``, initial states (a
    `streaming_model`'s state inputs: ``initial_h``, ``initial_c``, and
    outputs: ``Y_h``, ``Y_c``) and masks (``sequence_lens``) map onto the
    node. Other recurrent layers, and these with zoneout, other activations or
    another compute dtype (a `UserWarning` names them), become ONNX ``Loop``s
    with the same outputs. The weight mapping and what each execution provider
    computes are in the project's contract (``docs/contract.md``, "Native
    recurrent nodes in ONNX"). ONNX input names are the `tf.TensorSpec` names.

    Args:
        model: a `keras.Model`, or a callable when `input_signature` is given.
        path: the ``.onnx`` file to write.
        input_signature: `tf.TensorSpec`s of the inputs. Defaults to the model's
            inputs (in `model.inputs` order) with dynamic batch and time axes.
        opset: ONNX opset. Default 17.
        native_recurrent: True (default): native nodes; an ``LSTM`` node with
            peepholes (input ``P``) triggers a `UserWarning` naming its layer,
            since the OpenVINO execution provider drops ``P``.
            ``"portable"``: native nodes except those, whose layers keep their
            ``Loop``, so the file computes the same numbers on every provider.
            False: every recurrent layer is a ``Loop``.

    Returns:
        ``path`` as a string.

    Raises:
        ValueError: a bad ``opset`` or ``native_recurrent``, or a TensorFlow
            op that tf2onnx cannot convert.

    Examples:
        >>> import keras, onnx, os, tempfile
        >>> from keras_seq import layers
        >>> inputs = keras.Input((None, 3), name="x")
        >>> model = keras.Model(inputs, layers.GRU(4)(inputs))
        >>> path = convert_to_onnx(model, os.path.join(tempfile.mkdtemp(), "gru.onnx"))
        >>> [node.op_type for node in onnx.load(path).graph.node if node.op_type in ("GRU", "Loop")]
        ['GRU']
    """
    where = "convert_to_onnx"
    require_tensorflow("keras_seq.export.convert_to_onnx", EXPORT_THERE)
    opset = check_positive_int(where, "opset", opset)
    native_recurrent = check_native_recurrent(where, native_recurrent)
    call, specs = traceable(model, input_signature)
    path = os.fspath(path)
    if native_recurrent is False:
        model_proto = _from_function(tf.function(call, autograph=False), specs, int(opset))
    else:
        native = NativeRecurrence(where, portable=native_recurrent == "portable")
        with native.routing(models_of(model)):
            traced = tf.function(native.traced(call), autograph=False)
            model_proto = _from_function(traced, specs, int(opset), native.handlers())
    # tf2onnx only logs TensorFlow ops it cannot map and leaves them in the
    # graph, giving a file no runtime loads: fail here instead.
    unsupported = sorted(_unknown_onnx_ops(model_proto.graph))
    if unsupported:
        raise ArgumentValueError('convert_to_onnx', f'tf2onnx cannot convert the TensorFlow op(s) {unsupported} (opset {opset}); see serving/ONNX.md.')
    with open(path, "wb") as f:
        f.write(model_proto.SerializeToString())
    return path


# tf2onnx reads this variable: "FALSE" runs its graph optimisers in place.
_CATCH_ERRORS_VARIABLE = "TF2ONNX_CATCH_ERRORS"


def check_native_recurrent(where: str, value) -> bool | str:
    """``native_recurrent``: True, False or ``"portable"``."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if not isinstance(value, str):
        raise invalid_type(where, "native_recurrent", "True, False or 'portable'", value)
    if value != "portable":
        raise invalid_value(where, "native_recurrent", "True, False or 'portable'", value)
    return value


def _from_function(function, specs, opset: int, handlers=None):
    """``tf2onnx.convert.from_function``'s model, its optimisers run in place.

    By default tf2onnx deep-copies the whole graph before each of its graph
    optimisers (36 runs for a translation model), so that one that raises
    can be skipped; the copies were a quarter of the conversion (23.5 s
    against 17.8 s for a GRU translation model, the same ONNX outputs). So
    the first attempt runs them in place, and only if it raises does the
    conversion run again as tf2onnx does by default. A value of
    ``TF2ONNX_CATCH_ERRORS`` the user set is left to tf2onnx.
    """
    import tf2onnx

    def convert():
        with _tf2onnx_notes_dropped() as errors:
            model_proto = tf2onnx.convert.from_function(
                function, input_signature=specs, opset=opset, custom_op_handlers=handlers
            )[0]
        failed = [record.getMessage() for record in errors
                  if record.getMessage().startswith("Failed to convert node")]
        if failed:
            node = failed[0].split("'")[1] if "'" in failed[0] else failed[0]
            raise ArgumentValueError(
                "convert_to_onnx", f"tf2onnx could not convert {len(failed)} node(s) of the "
                f"traced graph (the first: {node!r}, opset {opset}); see serving/ONNX.md.")
        return model_proto

    if _CATCH_ERRORS_VARIABLE in os.environ:
        return convert()
    os.environ[_CATCH_ERRORS_VARIABLE] = "FALSE"
    try:
        return convert()
    except ArgumentValueError:  # a node tf2onnx cannot convert: the same again
        raise
    except Exception:  # an optimiser that fails in place: tf2onnx's default below
        pass
    finally:
        del os.environ[_CATCH_ERRORS_VARIABLE]
    return convert()


@contextlib.contextmanager
def _tf2onnx_notes_dropped():
    """tf2onnx's log kept from the user while it converts: its warnings and
    notes (a "missing output shape" per loop variable of a recurrent layer,
    its optimisers' summaries) are about its own graph, not the user's model.
    Yields the list of its error records: a node it failed to convert (it
    logs the error and goes on, writing a graph no runtime loads)."""
    import logging

    errors: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record):
            errors.append(record)

    top = logging.getLogger("tf2onnx")
    names = [name for name in logging.root.manager.loggerDict if name.startswith("tf2onnx.")]
    loggers = [top, *(logging.getLogger(name) for name in names)]
    saved = [(logger.level, logger.propagate) for logger in loggers]
    handler = Collect(logging.ERROR)
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        top.propagate = False  # the children's records reach `handler` alone
        top.addHandler(handler)
        yield errors
    finally:
        top.removeHandler(handler)
        for logger, (level, propagate) in zip(loggers, saved):
            logger.setLevel(level)
            logger.propagate = propagate


def _unknown_onnx_ops(graph) -> set[str]:
    """Op types of the default ONNX domain that ONNX does not define (subgraphs included)."""
    import onnx

    unknown = set()
    for node in graph.node:
        if node.domain in ("", "ai.onnx") and not onnx.defs.has(node.op_type):
            unknown.add(node.op_type)
        for attribute in node.attribute:
            for subgraph in [attribute.g, *attribute.graphs]:
                unknown |= _unknown_onnx_ops(subgraph)
    return unknown


def convert_seq2seq_to_onnx(
    model,
    path: str | os.PathLike,
    opset: int = _DEFAULT_OPSET,
    native_recurrent: bool | str = True,
) -> str:
    """Converts a translation model's teacher-forced forward pass to ONNX.

    Inputs ``encoder_inputs (B, S)`` and ``decoder_inputs (B, T)`` int32 with
    dynamic axes; output ``logits (B, T, V)`` float32, as in
    `convert_seq2seq_to_tflite`.

    Args:
        model: a model built by `models.rnn_seq2seq` or `models.transformer_seq2seq`.
        path: the ``.onnx`` file to write.
        opset: ONNX opset. Default 17.
        native_recurrent: as in `convert_to_onnx` (the encoder's recurrent
            layer as one node). Default True.

    Returns:
        ``path`` as a string.
    """
    require_tensorflow("keras_seq.export.convert_seq2seq_to_onnx", EXPORT_THERE)
    check_seq2seq("convert_seq2seq_to_onnx", model)
    return convert_to_onnx(seq2seq_forward(model), path, seq2seq_signature(), opset=opset,
                           native_recurrent=native_recurrent)


def convert_decoder_steps_to_onnx(
    model,
    encoder_path: str | os.PathLike,
    decoder_step_path: str | os.PathLike,
    target_length: int,
    opset: int = _DEFAULT_OPSET,
    native_recurrent: bool | str = True,
) -> tuple[str, str]:
    """Converts a translation model into an ONNX encoder and one-step decoder.

    Same inputs and outputs as `convert_decoder_steps_to_tflite` (ONNX input
    names ``encoder_inputs``; ``tokens``, ``t``, ``constant_<i>``,
    ``state_<i>``), for a decoding loop in the host.

    Args:
        model: a model built by `models.rnn_seq2seq` or `models.transformer_seq2seq`.
        encoder_path: the encoder's ``.onnx`` file.
        decoder_step_path: the decoder step's ``.onnx`` file.
        target_length: the most decoding steps (sizes the Transformer's caches).
        opset: ONNX opset. Default 17.
        native_recurrent: as in `convert_to_onnx` (the encoder's recurrent
            layer as one node). Default True.

    Returns:
        ``(encoder_path, decoder_step_path)`` as strings.
    """
    require_tensorflow("keras_seq.export.convert_decoder_steps_to_onnx", EXPORT_THERE)
    where = "convert_decoder_steps_to_onnx"
    encode, encode_signature, step, step_signature = decoder_step_functions(
        where, model, target_length
    )
    return (
        convert_to_onnx(encode, encoder_path, encode_signature, opset=opset,
                        native_recurrent=native_recurrent),
        convert_to_onnx(step, decoder_step_path, step_signature, opset=opset,
                        native_recurrent=native_recurrent),
    )
