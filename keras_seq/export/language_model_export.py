"""Exporting a language-model run (``keras-seq train --task lm``): one generation step for devices.

`export_language_model` writes, into the (staging) folder `export_run` gives it:

- ``lm_step.tflite`` (`convert_language_model_step_to_tflite`), and
  ``lm_step_<mode>.tflite`` for each quantization mode;
- for a recurrent model, ``lm_stream.onnx``: its `streaming_model` through
  `convert_to_onnx` (token ids ``(B, T)`` of any chunk length and each
  recurrent layer's states in, the logits ``(B, T, V)`` and the new states
  out; one native ONNX node per recurrent layer), the ONNX counterpart of the
  step for hosts that run onnxruntime;
- ``vocab.txt``, ``tokenizer.json`` and ``export.json`` (the kind of model,
  the context, the ids never generated, the inputs of the step): what a
  device needs to tokenize and run its generation loop;
- ``reference.npz``: held-out prompts and Keras' greedy continuation of each
  (`keras_seq.decoding.sample` with temperature 0 and the run's context, as
  ``keras-seq generate --temperature 0``), with Keras' milliseconds per token;
- the manifest entries `keras_seq.export.verify` checks.
"""

from __future__ import annotations

import os
import statistics
import time

import keras
import numpy as np
import tensorflow as tf

from keras_seq._validation import Arg, ArgumentValueError
from keras_seq.export._artifacts import HOST_FILE, REFERENCE_FILE, write_json
from keras_seq.export._tracing import language_model_step_function
from keras_seq.export.integer_tflite import is_integer
from keras_seq.export.onnx_export import convert_to_onnx
from keras_seq.export.streaming import streaming_model
from keras_seq.export.tflite_export import convert_language_model_step_to_tflite

__all__ = [
    "LM_FORMATS", "LM_STEP_FILE", "LM_STREAM_FILE", "export_language_model",
    "language_model_stream_function", "lm_step_file", "write_lm_reference",
]

LM_STEP_FILE = "lm_step.tflite"
LM_STREAM_FILE = "lm_stream.onnx"
# The formats of a language-model run: its generation step, its stream.
LM_FORMATS = ("tflite", "onnx")
# The held-out prompts: this many, of this many characters, each continued
# greedily for GENERATED characters.
PROMPTS = 20
PROMPT_LENGTH = 32
GENERATED = 200
_TIMING_RUNS = 3


def lm_step_file(quantize: str | None) -> str:
    """``lm_step.tflite``, or ``lm_step_<mode>.tflite`` for a quantized step."""
    return LM_STEP_FILE if quantize is None else f"lm_step_{quantize}.tflite"


def export_language_model(run, out: str, formats, quantize, examples: int, progress,
                          calibration=None):
    """Writes the step files, the host files and the reference of an LM run into ``out``.

    Args:
        run: the `keras_seq.run_folder.RunFolder` of the run.
        out: the folder to write into (exists, empty).
        formats: any of `LM_FORMATS`; None: both for a recurrent model,
            ``("tflite",)`` for a Transformer (it has no stream).
        quantize: the quantization modes, besides the float step.
        examples: at most this many prompts (and at most `PROMPTS`).
        progress: the export's `keras_seq.export._progress.Progress`.
        calibration: the `keras_seq.export.calibration.Calibration` of the
            integer steps (the steps fed over windows of the training text).

    Returns:
        ``(written, manifest)``: the paths keyed ``"tflite"``,
        ``"tflite_<mode>"``, ``"onnx"``, ``"reference"`` (when the run's
        held-out text gives prompts), and the manifest's content.

    Raises:
        ValueError: ``"onnx"`` for a Transformer language model.
    """
    from keras_seq.reserved_tokens import RESERVED_TOKENS
    from keras_seq.tasks import from_run

    model = from_run(run)
    tokenizer = model.preprocessor.tokenizer
    context = int(model.preprocessor.sequence_length)
    kind = "rnn" if model.recurrent else "transformer"
    if formats is None:
        formats = LM_FORMATS if kind == "rnn" else ("tflite",)
    if "onnx" in formats and kind != "rnn":
        raise ArgumentValueError(
            "export_run", "a Transformer language model has no streaming form (each token "
            "attends to the whole context); its export is lm_step.tflite ('tflite'), "
            "received ", Arg("formats"), " with 'onnx'."
        )
    written, artifacts = {}, []
    for mode in [None, *quantize] if "tflite" in formats else list(quantize):
        path = os.path.join(out, lm_step_file(mode))
        with progress.artifact(lm_step_file(mode)), open(path, "wb") as f:
            f.write(convert_language_model_step_to_tflite(
                model, context, quantize=mode, representative_data=_calibration_windows(
                    calibration, tokenizer, context) if is_integer(mode) else None))
        written["tflite" if mode is None else f"tflite_{mode}"] = path
        artifacts.append({"artifact": os.path.basename(path), "format": "tflite",
                          "quantize": mode, "task": "lm"})
    if "onnx" in formats:
        with progress.artifact(LM_STREAM_FILE):
            stream, signature = language_model_stream_function(model)
            written["onnx"] = convert_to_onnx(stream, os.path.join(out, LM_STREAM_FILE),
                                              signature)
        artifacts.append({"artifact": LM_STREAM_FILE, "format": "onnx", "quantize": None,
                          "task": "lm"})
    tokenizer.save(out)
    suppress = list(range(1, len(RESERVED_TOKENS)))
    _, signature, initial_state = language_model_step_function("export_run", model, context)
    write_json(
        os.path.join(out, HOST_FILE),
        {
            "task": "lm",
            "kind": kind,
            "context": context,
            # The padding id and the reserved ids are never generated.
            "never_ids": [0, *suppress],
            "inputs": [spec.name for spec in signature],
            "state_shapes": [[None, *s.shape[1:]] for s in initial_state(1)],
        },
    )
    prompts = held_out_prompts(run.held_out_text(), min(examples, PROMPTS), PROMPT_LENGTH)
    if prompts:
        path = os.path.join(out, REFERENCE_FILE)
        with progress.artifact("reference.npz (Keras' greedy text)"):
            write_lm_reference(path, model, tokenizer, prompts, context, suppress)
        written["reference"] = path
    manifest = {
        "task": "lm",
        "check": "generation",
        "run_dir": os.path.basename(os.path.normpath(run.path)),
        "reference": REFERENCE_FILE if prompts else None,
        "artifacts": artifacts,
        "context": context,
        "kind": kind,
    }
    return written, manifest


def language_model_stream_function(model):
    """``(stream, signature)``: the function ``lm_stream.onnx`` is, and its inputs.

    ``stream(token_ids, *states) -> (logits, *new_states)`` computes what the
    model's `streaming_model` computes for a chunk ``(B, T)`` of any length,
    with the streaming model's inputs (``token_ids``, then
    ``"recurrent_{i}_state_{j}"``). When every recurrent layer has an
    operator form (one native ONNX node each, no ``Loop``), it is the
    streaming model itself. Otherwise (the residual blocks of ``--model
    mingru``, ``minlstm``, ``rglru``, ``xlstm``) ONNX's ``If`` on the chunk's
    length chooses between:

    - one token (a generation loop's every call): the streaming model traced
      for one step, the step's ops and no ``Loop``
      (`keras_seq.layers.recurrent.rnn.scan` runs a static length of 1
      without one);
    - a longer chunk: that one-step model once per token, in one ``Loop``
      (tf2onnx converts one small loop body, not one loop per block).
    """
    from keras_seq.export._lowering import layers_of
    from keras_seq.export._tracing import default_signature, with_models
    from keras_seq.layers.recurrent.operator_forms import operator_form

    stream = streaming_model(model)
    signature = default_signature(stream)
    recurrent = [layer for layer in layers_of([stream]) if isinstance(layer, keras.layers.RNN)]
    if all(operator_form(layer.cell) is not None for layer in recurrent):
        # One native node per layer and no Loop, whatever the length. An If
        # with a one-step branch (no mask handling around the nodes) gained
        # 4% per token for the LSTM model (0.148 against 0.154 ms) and held
        # every weight twice: not worth it.
        return stream, signature

    def one_token(ids, states):
        return tuple(stream([tf.reshape(ids, [-1, 1]), *states]))

    def chunk(ids, states):
        length = tf.shape(ids)[1]

        def body(t, logits, *states):
            out = one_token(ids[:, t], list(states))
            return (t + 1, logits.write(t, out[0][:, 0]), *out[1:])

        logits = tf.TensorArray(stream.outputs[0].dtype, size=length)
        _, logits, *states = tf.while_loop(
            lambda t, *_: t < length, body, (tf.constant(0), logits, *states))
        return (tf.transpose(logits.stack(), [1, 0, 2]), *states)

    def function(ids, *states):
        return tf.cond(tf.equal(tf.shape(ids)[1], 1), lambda: one_token(ids, states),
                       lambda: chunk(ids, states))

    return with_models(function, model, stream), signature


def held_out_prompts(text: str | None, count: int, length: int) -> list[tuple[str, str]]:
    """``count`` (prompt, true continuation) pairs evenly spread over the held-out
    text; prompts of ``length`` characters (fewer for a short text)."""
    if not text or len(text) < 2:
        return []
    length = min(length, max(1, len(text) // 2))
    last = len(text) - length
    starts = np.unique(np.linspace(0, last, count).round().astype(int))
    return [
        (text[s : s + length], text[s + length : s + length + GENERATED]) for s in starts
    ]


def write_lm_reference(path, model, tokenizer, prompts, context, suppress) -> None:
    """Keras' greedy continuation of each prompt, and its milliseconds per token.

    ``reference.npz``: ``prompts``, ``continuations`` (the true text after
    each prompt), ``prompt_ids (N, P)``, ``keras_ids (N, GENERATED)``, the
    logits each was chosen from ``keras_logits (N, GENERATED, V)``, ``keras_text``, and ``keras_ms_per_token``: the median over runs of one
    prompt's generation time (batch 1, the prompt fed and `GENERATED`
    characters generated, in one compiled loop) divided by `GENERATED`.
    """
    from keras_seq import decoding

    prompt_ids = tokenizer.tokenize([p for p, _ in prompts]).to_tensor().numpy().astype(np.int32)

    @tf.function(autograph=False)
    def greedy(ids):
        return decoding.sample(
            model, ids, GENERATED, temperature=0.0, seed=0, context=context,
            suppress_ids=suppress, return_logits=True,
        )

    keras_ids, keras_logits = greedy(prompt_ids)
    keras_ids = keras_ids.numpy().astype(np.int32)
    one = prompt_ids[:1]
    greedy(one)  # traced once for batch 1, outside the timing
    times = []
    for _ in range(_TIMING_RUNS):
        t0 = time.perf_counter()
        greedy(one)[0].numpy()
        times.append(time.perf_counter() - t0)
    vocabulary = tokenizer.vocabulary
    np.savez(
        path,
        prompts=np.array([p for p, _ in prompts], dtype=str),
        continuations=np.array([c for _, c in prompts], dtype=str),
        prompt_ids=prompt_ids,
        keras_ids=keras_ids,
        keras_logits=keras_logits.numpy().astype(np.float32),
        keras_text=np.array(["".join(vocabulary[i] for i in row) for row in keras_ids], dtype=str),
        keras_ms_per_token=np.float64(1000 * statistics.median(times) / GENERATED),
    )


# Tokens of each window of training text a calibration step reads.
_CALIBRATION_WINDOW = 50


def _calibration_windows(calibration, tokenizer, context: int) -> np.ndarray:
    """Token ids ``(N, L)`` of windows spread evenly over the training text,
    ``N * L`` about ``calibration.count`` tokens (L at most ``context``)."""
    text = calibration.training()
    length = min(_CALIBRATION_WINDOW, context, calibration.count)
    windows = max(1, calibration.count // length)
    ids = tokenizer.encode([text], len(text) + 1).numpy()[0]
    ids = ids[ids != 0]
    starts = np.linspace(0, max(0, len(ids) - length), windows).astype(int)
    return np.stack([ids[s : s + length] for s in starts]).astype(np.int32)
