"""Export: what Keras' own exporters lack, for deploying translation models and classifiers.

Keras' own paths (`model.export(..., format="litert" | "onnx" | "tf_saved_model")`,
`tf.lite.TFLiteConverter.from_keras_model`) work for every layer and model of
this package. This package adds, one module per job:

- `saved_model`: `export_saved_model` writes a SavedModel whose
  ``serving_default`` signature maps a ``(B,)`` string tensor to ``(B,)``
  strings (tokenize -> greedy or beam decoding -> detokenize, all TensorFlow
  ops), for TF Serving or plain `tf.saved_model.load`;
  `export_strings_saved_model` writes any task that reads a text in one pass
  (a classifier, a tagger) the same way; `saved_model_op_names` lists the
  ops a server must provide.
- `tflite_export`: `convert_to_tflite` converts any model or function with TFLite
  builtin ops only, optionally quantized (``quantize="dynamic"`` or
  ``"float16"``) or with fused LSTM kernels (``fuse_lstm=True``);
  `convert_seq2seq_to_tflite` converts a translation model's teacher-forced
  forward pass and `convert_decoder_steps_to_tflite` an encoder plus a single
  decoder step with explicit state, for a decoding loop on the device
  (`tflite_greedy_decode` is that loop, in NumPy);
  `convert_language_model_step_to_tflite` converts one generation step of a
  language model with its state or key/value cache explicit;
  `convert_classifier_to_tflite` a classifier with its softmax
  (`classifier_probabilities`). Files run with ai_edge_litert.
- `lstm_fusion`: `convert_fused_lstm`, TFLite's fused LSTM kernel behind
  ``fuse_lstm=True``.
- `onnx_export`: the same through tf2onnx (`convert_to_onnx`,
  `convert_seq2seq_to_onnx`, `convert_decoder_steps_to_onnx`), each
  recurrent layer that ONNX's operators express one ``LSTM``, ``GRU`` or
  ``RNN`` node (`onnx_recurrent`).
- `streaming`: `streaming_model` gives a recurrent model its states as inputs
  and outputs, to run chunk by chunk (in Keras, or converted by
  `convert_to_tflite` or `convert_to_onnx`), `initial_streaming_states`
  its first states and `streaming_calibration` the step examples that
  calibrate an integer step model.
- `integer_tflite`: ``quantize="int8"`` and ``"int16x8"`` of
  `convert_to_tflite`: loops unrolled (or, with ``fuse_lstm=True``, each
  LSTM TFLite's integer LSTM kernel), the quantizer in a child process.
- `streaming_translation`: `convert_streaming_translator_to_tflite` converts
  a monotonic-attention translation model into an encoder step and a
  decoder step that translate while the source streams in
  (`tflite_streaming_translate` is the host loop).
- `run`: `export_run` exports a ``keras-seq train`` run folder in any of these
  formats, with Keras' reference outputs on held-out examples; a language
  model's run as ``lm_step.tflite`` and, if recurrent, ``lm_stream.onnx``
  (`language_model_export`), a classifier's as ``classifier/1/`` and
  ``tflite/classifier.tflite`` (`classifier_export`); each run's recipe
  (`keras_seq.recipes`) says which.
- `verification`: `verify` runs every artifact of such a folder in a process that
  cannot import keras_seq (ONNX files on every onnxruntime execution provider
  there) and compares it with Keras (``keras-seq verify``).
"""

from keras_seq.export.onnx_export import (
    convert_decoder_steps_to_onnx,
    convert_seq2seq_to_onnx,
    convert_to_onnx,
)
from keras_seq.export.run import export_run
from keras_seq.export.saved_model import (
    export_classifier_saved_model,
    export_saved_model,
    export_strings_saved_model,
    saved_model_op_names,
)
from keras_seq.export.streaming import (
    initial_streaming_states,
    streaming_calibration,
    streaming_model,
)
from keras_seq.export.streaming_translation import (
    convert_streaming_translator_to_tflite,
    tflite_streaming_translate,
)
from keras_seq.export.tflite_export import (
    classifier_probabilities,
    convert_classifier_to_tflite,
    convert_decoder_steps_to_tflite,
    convert_language_model_step_to_tflite,
    convert_seq2seq_to_tflite,
    convert_to_tflite,
    run_tflite,
    tflite_greedy_decode,
    tflite_op_names,
)
from keras_seq.verification import verification_table, verify

__all__ = [
    "classifier_probabilities",
    "convert_classifier_to_tflite",
    "convert_decoder_steps_to_onnx",
    "convert_decoder_steps_to_tflite",
    "convert_language_model_step_to_tflite",
    "convert_seq2seq_to_onnx",
    "convert_seq2seq_to_tflite",
    "convert_streaming_translator_to_tflite",
    "convert_to_onnx",
    "convert_to_tflite",
    "export_classifier_saved_model",
    "export_run",
    "export_saved_model",
    "export_strings_saved_model",
    "initial_streaming_states",
    "run_tflite",
    "saved_model_op_names",
    "streaming_calibration",
    "streaming_model",
    "tflite_greedy_decode",
    "tflite_op_names",
    "tflite_streaming_translate",
    "verification_table",
    "verify",
]
