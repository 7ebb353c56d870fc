"""The child process of `keras_seq.export.integer_tflite`: calibrate, quantize, load once.

``python -m keras_seq.export._integer_worker FOLDER MODE COUNT`` (started
through `keras_seq._unused_imports.python_command`): converts the
SavedModel ``FOLDER/model`` (or quantizes the float flatbuffer
``FOLDER/float.tflite``, the fused LSTM route and int8 loops) to an integer-only
flatbuffer (``MODE``: ``int8`` or ``int16x8``), calibrated on the ``COUNT``
examples of ``FOLDER/examples.npz`` (with a fourth argument
``integer_io``: integer inputs and outputs); mends what the quantizer
leaves or gets wrong (`keras_seq.export._integer_mends`,
`keras_seq.export._flatbuffer`: a move or a mask's
cast in float, a fused LSTM's hidden-state scales; in 16x8, shared
constants, a SUM's range, selects of two scales); writes the ops TFLite
Micro lacks with ops it has (`keras_seq.export._portable_ops`); writes ``FOLDER/model.tflite``, then loads it in
LiteRT and runs it once on the first example, with and without the default
delegates (a 16x8 fused LSTM, which LiteRT has no kernel for: once in
TensorFlow Lite for Microcontrollers). A conversion error, or a model LiteRT refuses to run, is
written in one line to ``FOLDER/failure.txt``; a crash leaves ``FOLDER/converted`` if the converter
had finished. Nothing here is imported by the package.
"""

from __future__ import annotations

import os
import sys


def main(folder: str, mode: str, count: int, integer_io: bool = False) -> None:
    import numpy as np

    from keras_seq.export._integer_mends import integer_only
    from keras_seq.export._portable_ops import portable
    from keras_seq.export.integer_tflite import first_line, worker_paths

    flatbuffer_file, failure_file, converted_file, float_file = worker_paths()
    with open(os.path.join(folder, "inputs.txt")) as f:
        names = f.read().split("\n")
    stored = np.load(os.path.join(folder, "examples.npz"))
    examples = [[stored[f"{n}_{i}"] for i in range(len(names))] for n in range(count)]

    def representative_dataset():
        for example in examples:
            yield dict(zip(names, example))

    try:
        if os.path.exists(os.path.join(folder, float_file)):
            with open(os.path.join(folder, float_file), "rb") as f:
                flatbuffer = _quantized(f.read(), mode, examples, integer_io)
        else:
            flatbuffer = _converted(os.path.join(folder, "model"), mode, representative_dataset,
                                    names, examples, integer_io)
    except Exception as error:  # the converter's errors: one line for the caller
        said = f"the converter refused this model: {first_line(error)}"
        with open(os.path.join(folder, failure_file), "w") as f:
            f.write(said)
        return
    # What the quantizer leaves in float and can be integer (a SPLIT, a mask's
    # CAST); ops TFLite Micro lacks, in ops it has.
    try:
        flatbuffer = portable(integer_only(flatbuffer))
    except Exception as error:  # a bug of ours, said as such rather than as a crash
        with open(os.path.join(folder, failure_file), "w") as f:
            f.write(f"mending the quantizer's output failed ({type(error).__name__}: "
                    f"{first_line(error)}); the model was not converted")
        return
    with open(os.path.join(folder, flatbuffer_file), "wb") as f:
        f.write(flatbuffer)
    open(os.path.join(folder, converted_file), "w").close()

    if _has_int16_lstm(flatbuffer):  # LiteRT has no 16x8 LSTM kernel
        _run_in_micro(folder, flatbuffer, names, examples[0], failure_file)
        return
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    for resolver in (OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES, OpResolverType.AUTO):
        try:
            runner = Interpreter(model_content=flatbuffer,
                                 experimental_op_resolver_type=resolver).get_signature_runner()
            details = runner.get_input_details()
            runner(**{name: value.astype(details[name]["dtype"])
                      for name, value in zip(names, examples[0])})
        except (RuntimeError, ValueError) as error:  # a kernel refusing the model: its words
            with open(os.path.join(folder, failure_file), "w") as f:
                f.write(f"LiteRT cannot run the integer model the converter wrote: "
                        f"{first_line(error)}")
            return


def _has_int16_lstm(flatbuffer: bytes) -> bool:
    from keras_seq.export._flatbuffer import code_of, load_model, schema_module

    schema = schema_module()
    model_t = load_model(flatbuffer)
    return any(code_of(model_t, op) == schema.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM
               and g.tensors[op.inputs[0]].type == schema.TensorType.INT16
               for g in model_t.subgraphs for op in g.operators)


def _run_in_micro(folder: str, flatbuffer: bytes, names, example, failure_file) -> None:
    """One run in TensorFlow Lite for Microcontrollers' interpreter (its
    presence checked by the caller, `integer_tflite.require_micro`)."""
    from tflite_micro.python.tflite_micro import runtime

    from keras_seq.export._flatbuffer import load_model
    from keras_seq.export.integer_tflite import first_line

    model_t = load_model(flatbuffer)
    graph, signature = model_t.subgraphs[0], model_t.signatureDefs[0]
    position = {m.name.decode(): list(graph.inputs).index(m.tensorIndex)
                for m in signature.inputs}
    try:
        interpreter = runtime.Interpreter.from_bytes(flatbuffer)
        for name, value in zip(names, example):
            dtype = interpreter.get_input_details(position[name])["dtype"]
            interpreter.set_input(value.astype(dtype), position[name])
        interpreter.invoke()
    except (RuntimeError, ValueError) as error:
        with open(os.path.join(folder, failure_file), "w") as f:
            f.write("TensorFlow Lite for Microcontrollers cannot run the integer model the "
                    f"converter wrote: {first_line(error)}")


def _converted(saved_model: str, mode: str, representative_dataset, names, examples,
               integer_io: bool) -> bytes:
    """TensorFlow's converter with integer quantization, on a SavedModel.

    16x8: the float flatbuffer, its integer inputs (token ids) given the
    examples' range (the 16x8 quantizer wants a range on every input and
    calibrates none on ids), then the quantizer the converter runs for 16x8,
    told to leave in float what it has no 16x8 kernel for: ops on ids (a
    `LESS`, a `SELECT_V2` of Keras' `Embedding`) keep their int32 kernels,
    and `integer_only` or the warning takes care of the rest.
    """
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model)
    if mode == "int16x8":
        from tensorflow.lite.python.optimize import calibrator

        from keras_seq.export._flatbuffer import builtin_op_count
        from keras_seq.export._integer_mends import int16_sums, prepared_for_16x8

        flatbuffer = calibrator.add_intermediate_tensors(prepared_for_16x8(
            converter.convert(), {name: (min(float(e[i].min()) for e in examples),
                                         max(float(e[i].max()) for e in examples))
                                  for i, name in enumerate(names)}))
        edge = tf.int16 if integer_io else tf.float32
        quantized = calibrator.Calibrator(flatbuffer).calibrate_and_quantize(
            representative_dataset, edge, edge, True, tf.int16, tf.int64)
        if not builtin_op_count(quantized, "SUM"):
            return quantized
        # The ranges the quantizer replaces by its inputs' on a SUM: a second
        # pass as long as the first (2.1 s against 2.0 s for a tagger, 200 examples).
        calibrated = calibrator.Calibrator(flatbuffer).calibrate(representative_dataset)
        return int16_sums(quantized, calibrated)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative_dataset
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if integer_io:  # integer inputs and outputs: no QUANTIZE/DEQUANTIZE at the edges
        converter.inference_input_type = converter.inference_output_type = tf.int8
    return converter.convert()


def _quantized(flatbuffer: bytes, mode: str, examples, integer_io: bool) -> bytes:
    """A float flatbuffer calibrated and quantized as the converter does
    it: intermediate tensors added to the fused LSTM ops (where the
    calibration records the gate ranges), then TensorFlow's MLIR quantizer,
    in int8 or (the fused route) 16x8."""
    import tensorflow as tf
    from tensorflow.compiler.mlir.lite import types_pb2
    from tensorflow.lite.python import convert
    from tensorflow.lite.python.optimize import calibrator

    from keras_seq.export import _loop_calibration
    from keras_seq.export._flatbuffer import int16_lstm_biases_widened, integer_lstm_states_agree
    from keras_seq.export._integer_mends import integer_loop_carries, integer_only

    edge = tf.int8 if integer_io else tf.float32
    if _loop_calibration.flatbuffer_has_loops(flatbuffer):
        # TensorFlow's calibrator crashes on a WHILE: the ranges are recorded
        # here, and the values the loop carries made integer after.
        calibrated = _loop_calibration.calibrated(flatbuffer, examples)
        quantized = convert.mlir_quantize(calibrated, input_data_type=edge,
                                          output_data_type=edge)
        return integer_loop_carries(integer_only(quantized))
    with_intermediates = calibrator.add_intermediate_tensors(flatbuffer)
    calibrated = calibrator.Calibrator(with_intermediates).calibrate(lambda: iter(examples))
    if mode == "int16x8":  # int16 edges need `fully_quantize` there
        edge = tf.int16 if integer_io else tf.float32
        return int16_lstm_biases_widened(integer_lstm_states_agree(convert.mlir_quantize(
            calibrated, inference_type=types_pb2.QUANTIZED_INT16, input_data_type=edge,
            output_data_type=edge, fully_quantize=integer_io)))
    return integer_lstm_states_agree(
        convert.mlir_quantize(calibrated, input_data_type=edge, output_data_type=edge))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:] == ["integer_io"])
