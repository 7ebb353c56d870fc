"""ONNX through tf2onnx: any model or function, and translation models."""

from __future__ import annotations

import os
from collections.abc import Sequence

import tensorflow as tf

from keras_seq._backend import EXPORT_THERE, require_tensorflow
from keras_seq._validation import check_positive_int
from keras_seq.export._checks import check_seq2seq
from keras_seq.export._tracing import (
    decoder_step_functions,
    seq2seq_forward,
    seq2seq_signature,
    traceable,
)

_DEFAULT_OPSET = 17


def convert_to_onnx(
    model,
    path: str | os.PathLike,
    input_signature: Sequence[tf.TensorSpec] | None = None,
    opset: int = _DEFAULT_OPSET,
) -> str:
    """Converts a Keras model (or any callable) to ONNX with tf2onnx.

    The function is traced with ``training=False`` and its weights frozen;
    recurrent inference loops become ONNX ``Loop``. ONNX input names are the
    `tf.TensorSpec` names.

    Args:
        model: a `keras.Model`, or a callable when `input_signature` is given.
        path: the ``.onnx`` file to write.
        input_signature: `tf.TensorSpec`s of the inputs. Defaults to the model's
            inputs (in `model.inputs` order) with dynamic batch and time axes.
        opset: ONNX opset. Default 17.

    Returns:
        ``path`` as a string.

    Examples:
        >>> import keras, os, tempfile
        >>> from keras_seq import layers
        >>> inputs = keras.Input((None, 3), name="x")
        >>> model = keras.Model(inputs, layers.GRU(4)(inputs))
        >>> path = convert_to_onnx(model, os.path.join(tempfile.mkdtemp(), "gru.onnx"))
        >>> os.path.basename(path), os.path.isfile(path)
        ('gru.onnx', True)
    """
    require_tensorflow("keras_seq.export.convert_to_onnx", EXPORT_THERE)
    opset = check_positive_int("convert_to_onnx", "opset", opset)
    call, specs = traceable(model, input_signature)
    path = os.fspath(path)
    model_proto = _from_function(tf.function(call), specs, int(opset))
    # tf2onnx only logs TensorFlow ops it cannot map and leaves them in the
    # graph, giving a file no runtime loads: fail here instead.
    unsupported = sorted(_unknown_onnx_ops(model_proto.graph))
    if unsupported:
        raise ValueError(
            f"convert_to_onnx: tf2onnx cannot convert the TensorFlow op(s) {unsupported} "
            f"(opset {opset}); see serving/ONNX.md."
        )
    with open(path, "wb") as f:
        f.write(model_proto.SerializeToString())
    return path


# tf2onnx reads this variable: "FALSE" runs its graph optimisers in place.
_CATCH_ERRORS_VARIABLE = "TF2ONNX_CATCH_ERRORS"


def _from_function(function, specs, opset: int):
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
        return tf2onnx.convert.from_function(function, input_signature=specs, opset=opset)[0]

    if _CATCH_ERRORS_VARIABLE in os.environ:
        return convert()
    os.environ[_CATCH_ERRORS_VARIABLE] = "FALSE"
    try:
        return convert()
    except Exception:  # an optimiser that fails in place: tf2onnx's default below
        pass
    finally:
        del os.environ[_CATCH_ERRORS_VARIABLE]
    return convert()


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
    model, path: str | os.PathLike, opset: int = _DEFAULT_OPSET
) -> str:
    """Converts a translation model's teacher-forced forward pass to ONNX.

    Inputs ``encoder_inputs (B, S)`` and ``decoder_inputs (B, T)`` int32 with
    dynamic axes; output ``logits (B, T, V)`` float32, as in
    `convert_seq2seq_to_tflite`.

    Args:
        model: a model built by `models.rnn_seq2seq` or `models.transformer_seq2seq`.
        path: the ``.onnx`` file to write.
        opset: ONNX opset. Default 17.

    Returns:
        ``path`` as a string.
    """
    require_tensorflow("keras_seq.export.convert_seq2seq_to_onnx", EXPORT_THERE)
    check_seq2seq("convert_seq2seq_to_onnx", model)
    return convert_to_onnx(seq2seq_forward(model), path, seq2seq_signature(), opset=opset)


def convert_decoder_steps_to_onnx(
    model,
    encoder_path: str | os.PathLike,
    decoder_step_path: str | os.PathLike,
    target_length: int,
    opset: int = _DEFAULT_OPSET,
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

    Returns:
        ``(encoder_path, decoder_step_path)`` as strings.
    """
    require_tensorflow("keras_seq.export.convert_decoder_steps_to_onnx", EXPORT_THERE)
    where = "convert_decoder_steps_to_onnx"
    encode, encode_signature, step, step_signature = decoder_step_functions(
        where, model, target_length
    )
    return (
        convert_to_onnx(encode, encoder_path, encode_signature, opset=opset),
        convert_to_onnx(step, decoder_step_path, step_signature, opset=opset),
    )
