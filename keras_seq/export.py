"""Export: TFLite conversion with builtin ops only, op inspection, and running.

This is the one export module of the package. Recurrent loops are traced in
their TFLite-builtin form (``builtin_loop_mode``) while converting, so no Flex
delegate is needed.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from keras_seq.layers._recurrent_driver import builtin_loop_mode


def _as_specs(model, input_signature):
    if input_signature is not None:
        return list(input_signature)
    specs = []
    for t in model.inputs:
        # Batch and time stay dynamic; feature sizes are fixed by the weights.
        shape = [None] + list(t.shape[1:])
        if len(shape) >= 2:
            shape[1] = None
        specs.append(tf.TensorSpec(shape, tf.as_dtype(t.dtype), name=t.name.split(":")[0]))
    return specs


def convert_to_tflite(
    model,
    input_signature: Sequence[tf.TensorSpec] | None = None,
    optimize: bool = False,
) -> bytes:
    """Converts a Keras model (or any callable) to a builtin-ops-only `.tflite`.

    Args:
        model: a `keras.Model`, or a callable when `input_signature` is given.
        input_signature: `tf.TensorSpec`s of the inputs. Defaults to the model's
            inputs with a dynamic batch and a dynamic time axis.
        optimize: apply the default TFLite size/latency optimisations.

    Returns:
        The flatbuffer bytes. Conversion fails (rather than falling back to the
        Flex delegate) if any op is not a TFLite builtin.
    """
    specs = _as_specs(model, input_signature)
    if input_signature is None:
        def call(*args):
            return model(args[0] if len(args) == 1 else list(args), training=False)
    else:
        def call(*args):
            return model(*args)

    with builtin_loop_mode():
        concrete = tf.function(call).get_concrete_function(*specs)
    # No trackable object: the converter then freezes the variables into
    # constants. Passing the model keeps them as resource variables
    # (VAR_HANDLE/READ_VARIABLE) that nothing initialises, and outputs are NaN.
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if optimize:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    return converter.convert()


def tflite_op_names(tflite_model: bytes) -> set[str]:
    """Names of every operator in every subgraph (while-loop bodies included).

    Custom (non-builtin) operators are reported as ``"CUSTOM:<name>"`` so that a
    Flex op such as ``FlexTensorListReserve`` is visible to callers.
    """
    from tensorflow.lite.python import schema_py_generated as schema

    m = schema.Model.GetRootAsModel(tflite_model, 0)
    code_names = {}
    builtin = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    for i in range(m.OperatorCodesLength()):
        oc = m.OperatorCodes(i)
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
        if code == schema.BuiltinOperator.CUSTOM:
            code_names[i] = "CUSTOM:" + oc.CustomCode().decode()
        else:
            code_names[i] = builtin.get(code, str(code))
    names = set()
    for s in range(m.SubgraphsLength()):
        sg = m.Subgraphs(s)
        for o in range(sg.OperatorsLength()):
            names.add(code_names[sg.Operators(o).OpcodeIndex()])
    return names


def run_tflite(tflite_model: bytes, *inputs: np.ndarray) -> list[np.ndarray]:
    """Runs a converted model on concrete inputs (resizing dynamic dimensions)."""
    with warnings.catch_warnings():
        # tf.lite.Interpreter warns that it moves to ai_edge_litert; it still works.
        warnings.simplefilter("ignore", UserWarning)
        interpreter = tf.lite.Interpreter(model_content=tflite_model)
    details = interpreter.get_input_details()
    if len(details) != len(inputs):
        raise ValueError(
            f"run_tflite: the model takes {len(details)} inputs, got {len(inputs)}."
        )
    for d, x in zip(details, inputs):
        interpreter.resize_tensor_input(d["index"], np.shape(x), strict=False)
    interpreter.allocate_tensors()
    for d, x in zip(details, inputs):
        interpreter.set_tensor(d["index"], np.asarray(x, dtype=d["dtype"]))
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
