"""The TFLite converter settings, shared by `convert_to_tflite` and `convert_fused_lstm`.

Builtin ops only (conversion fails rather than falling back to the Flex
delegate) and the weight quantization asked for: ``"dynamic"`` is
dynamic-range quantization (int8 weights, no representative dataset),
``"float16"`` stores float16 weights computed in float32. The values are
checked by `keras_seq.export._checks.check_quantize`.
"""

from __future__ import annotations

import logging
import re

import tensorflow as tf

from keras_seq._stderr import stderr_passed_on
from keras_seq._validation import ArgumentValueError
from keras_seq.export._flatbuffer import inputs_outputs_in_call_order


def convert_with_signature(concrete, input_names: list[str], quantize: str | None) -> bytes:
    """Converts a traced function of flat outputs into a flatbuffer with a SignatureDef.

    The signature's inputs are the function's spec names (``input_names``,
    in call order) and its outputs ``output_0`` … ``output_n``; the main
    subgraph's inputs and outputs keep the call order too, so a positional
    runner and a signature runner agree. The variables the function reads
    are held by the trackable object the converter needs for signatures,
    and frozen into constants.
    """
    trackable = tf.Module()
    trackable.captured = list(concrete.variables)
    flatbuffer = convert_concrete_function(concrete, quantize, trackable)
    return inputs_outputs_in_call_order(flatbuffer, input_names)


def convert_concrete_function(concrete, quantize: str | None, trackable=None) -> bytes:
    """Converts one concrete function to a builtin-ops-only flatbuffer.

    Args:
        concrete: a `tf.types.experimental.ConcreteFunction`.
        quantize: `None`, ``"dynamic"`` or ``"float16"``.
        trackable: the object that holds the function's variables, or `None`
            to freeze them into constants (the converter's trackable-object
            note is then not shown: leaving it out is chosen).

    Returns:
        The flatbuffer bytes.
    """
    with _without_trackable_note():
        converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], trackable)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    # An int8 export's loops write each step with XLA's DynamicUpdateSlice
    # (`keras_seq.export._lowering.BuiltinLoops`): TFLite's builtin op.
    converter._experimental_enable_dynamic_update_slice = True
    if quantize is not None:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "float16":
        converter.target_spec.supported_types = [tf.float16]
    # The converter's own stderr (C++ diagnostics) is passed on after a
    # conversion that worked and dropped after one that failed: its error
    # says what failed, in one line.
    failed: list = []
    with stderr_passed_on(lambda line: not failed):
        try:
            return converter.convert()
        except Exception as error:
            if type(error).__name__ != "ConverterError":
                raise
            failed.append(error)
    raise _not_builtin(failed[0]) from None


def _not_builtin(error) -> ArgumentValueError:
    """The converter's failure (pages of MLIR) as one line naming the ops."""
    ops = sorted(set(re.findall(r"'(tf\.\w+)' op", str(error))))
    found = f"ops that are not TFLite builtins ({', '.join(ops)})" if ops else (
        "a graph the TFLite converter cannot convert to builtin ops")
    hint = ""
    if any(op.startswith("tf.TensorList") for op in ops):
        hint = ("; a TensorArray loop, as Keras' own recurrent layers run inside a function "
                "whose keras.Model the converter is not given: convert the keras.Model")
    return ArgumentValueError("convert_to_tflite", f"the traced function has {found}{hint}.")


class _without_trackable_note(logging.Filter):
    """Drops the converter's "Please consider providing the trackable_obj"
    warning while it is active."""

    def filter(self, record):
        return "trackable_obj" not in record.getMessage()

    _LOGGERS = ("tensorflow", "absl")

    def __enter__(self):
        for name in self._LOGGERS:
            logging.getLogger(name).addFilter(self)
        return self

    def __exit__(self, *exc_info):
        for name in self._LOGGERS:
            logging.getLogger(name).removeFilter(self)
