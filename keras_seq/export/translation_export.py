"""Exporting a translation run (``keras-seq train``, ``--task dates`` or ``translate``).

`export_translation` writes, into the (staging) folder `export_run` gives it:

- ``translator/1/`` (``"savedmodel"``): `export_saved_model`, strings in,
  strings out, in the version layout of TF Serving's model base path;
- ``tflite/`` (``"tflite"``): the forward pass ``seq2seq.tflite``
  (`convert_seq2seq_to_tflite`), ``encoder.tflite`` and ``decoder_step.tflite``
  (`convert_decoder_steps_to_tflite`); ``tflite_<mode>/`` the encoder and
  decoder step quantized; with monotonic attention ``tflite_stream/``
  (`convert_streaming_translator_to_tflite`);
- ``onnx/`` (``"onnx"``): the same three models in ONNX (`convert_to_onnx`);
- ``reference.npz``: Keras' decoding and logits of held-out pairs
  (`write_reference`), and the manifest `keras_seq.export.verify` checks.

Every host-side folder also holds the tokenizer files and ``export.json``
(lengths and special ids): a device tokenizes and runs the decoding loop itself.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from keras_seq.export._artifacts import REFERENCE_FILE, artifact_entry, host_folder
from keras_seq.export.integer_tflite import is_integer
from keras_seq.export.onnx_export import convert_decoder_steps_to_onnx, convert_seq2seq_to_onnx
from keras_seq.export.saved_model import export_saved_model
from keras_seq.export.streaming_translation import convert_streaming_translator_to_tflite
from keras_seq.export.tflite_export import (
    convert_decoder_steps_to_tflite,
    convert_seq2seq_to_tflite,
)
from keras_seq.reserved_tokens import END_ID, PAD_ID, START_ID, UNK_ID

__all__ = ["SERVING_MODEL", "export_translation", "write_reference"]

SERVING_MODEL = "translator"
"""The SavedModel of a translation run's export: ``OUT/translator/1``."""
# Keras logits are stored for the first examples only, up to this many floats
# (64 MB): enough to measure the numeric error, small for any vocabulary.
_MAX_REFERENCE_LOGITS = 16 * 2**20


def export_translation(folder, out, formats, beam_width, quantize, examples, progress,
                       calibration=None):
    """Writes a translation run's artifacts and reference into ``out`` (exists,
    empty): ``(paths written, manifest)``; see the module docstring.

    Args:
        folder: the run's `keras_seq.run_folder.RunFolder`.
        out: the folder to write into.
        formats: any of ``"savedmodel"``, ``"tflite"``, ``"onnx"``.
        beam_width: the SavedModel's decoding: 1 (greedy) or a beam width.
        quantize: the quantization modes of the encoder and decoder step.
        examples: at most this many held-out pairs in ``reference.npz``.
        progress: the export's `keras_seq.export._progress.Progress`.
        calibration: the `keras_seq.export.calibration.Calibration` of the
            integer files (training sources, padded to ``source_length``).
    """
    from keras_seq.tasks import from_run

    translator = from_run(folder)
    preprocessor = translator.preprocessor
    run = {
        "folder": folder,
        "source_length": int(preprocessor.sequence_length),
        "target_length": int(preprocessor.target_length),
        "model": translator,
        "tokenizer": preprocessor.tokenizer,
        "calibration": calibration,
    }
    steps = []  # (paths written, manifest entry) of each artifact
    if "savedmodel" in formats:
        with progress.artifact(f"{SERVING_MODEL}/1 (SavedModel)"):
            steps.append(_export_saved_model(run, out, beam_width))
    for mode in ([None] if "tflite" in formats else []) + list(quantize):
        with progress.artifact("tflite/" if mode is None else f"tflite_{mode}/"):
            steps.append(_export_tflite(run, out, mode))
    if "tflite" in formats and run["model"].monotonic:
        with progress.artifact("tflite_stream/ (a translator that starts before the source "
                               "ends)"):
            steps.append(_export_tflite_stream(run, out))
    if "onnx" in formats:
        with progress.artifact("onnx/"):
            steps.append(_export_onnx(run, out))
    written = {}
    for paths, _ in steps:
        written.update(paths)
    written.update(_export_reference(run, out, examples, beam_width, progress))
    manifest = {
        "check": "translation",
        "run_dir": os.path.basename(os.path.normpath(folder.path)),
        "reference": REFERENCE_FILE if "reference" in written else None,
        "artifacts": [entry for _, entry in steps],
        "source_length": run["source_length"],
        "target_length": run["target_length"],
    }
    return written, manifest


def _export_saved_model(run, out, beam_width):
    """``translator/1/``: strings in, strings out, for TF Serving."""
    path = export_saved_model(
        run["model"],
        run["tokenizer"],
        run["tokenizer"],
        os.path.join(out, SERVING_MODEL, "1"),
        run["source_length"],
        run["target_length"],
        beam_width=beam_width,
    )
    entry = artifact_entry(out, path, "savedmodel", None)
    entry["beam_width"] = int(beam_width)
    return {"savedmodel": path}, entry


def _export_tflite(run, out, mode):
    """``tflite/`` (mode None: forward pass, encoder, decoder step) or ``tflite_<mode>/``."""
    name = "tflite" if mode is None else f"tflite_{mode}"
    folder = host_folder(out, name, run["tokenizer"], _host_config(run, mode))
    sources = None
    if is_integer(mode):
        calibration = run["calibration"]
        texts = [source for source, _ in calibration.training()[: calibration.count]]
        sources = run["tokenizer"].encode(texts, run["source_length"]).numpy()
    encoder, decoder_step = convert_decoder_steps_to_tflite(
        run["model"], run["target_length"], quantize=mode, representative_data=sources
    )
    files = [("encoder", encoder), ("decoder_step", decoder_step)]
    if mode is None:
        files.insert(0, ("", convert_seq2seq_to_tflite(run["model"])))
    paths = {}
    for key, flatbuffer in files:
        path = os.path.join(folder, f"{key or 'seq2seq'}.tflite")
        with open(path, "wb") as f:
            f.write(flatbuffer)
        paths[f"{name}_{key}" if key else name] = path
    return paths, artifact_entry(out, folder, "tflite", mode)


def _export_tflite_stream(run, out):
    """``tflite_stream/``: the monotonic translator's encoder and decoder
    steps, which read the source chunk by chunk and emit while it arrives."""
    folder = host_folder(out, "tflite_stream", run["tokenizer"], _host_config(run, None))
    paths = {}
    for key, flatbuffer in convert_streaming_translator_to_tflite(run["model"]).items():
        path = os.path.join(folder, f"{key}.tflite")
        with open(path, "wb") as f:
            f.write(flatbuffer)
        paths[f"tflite_stream_{key}"] = path
    return paths, artifact_entry(out, folder, "tflite_stream", None)


def _export_onnx(run, out):
    """``onnx/``: forward pass, encoder and decoder step."""
    folder = host_folder(out, "onnx", run["tokenizer"], _host_config(run, None))
    paths = {"onnx": convert_seq2seq_to_onnx(run["model"], os.path.join(folder, "seq2seq.onnx"))}
    paths["onnx_encoder"], paths["onnx_decoder_step"] = convert_decoder_steps_to_onnx(
        run["model"],
        os.path.join(folder, "encoder.onnx"),
        os.path.join(folder, "decoder_step.onnx"),
        run["target_length"],
    )
    return paths, artifact_entry(out, folder, "onnx", None)


def _export_reference(run, out, examples, beam_width, progress):
    """``reference.npz`` with Keras' outputs, when the run has held-out examples."""
    pairs = run["folder"].held_out_pairs(examples)
    if not pairs:
        return {}
    path = os.path.join(out, REFERENCE_FILE)
    with progress.artifact(f"{REFERENCE_FILE} (Keras' translations)"):
        write_reference(
            path, run["model"], run["tokenizer"], pairs,
            run["source_length"], run["target_length"], beam_width,
        )
    return {"reference": path}


def _host_config(run, quantize):
    return {
        "source_length": run["source_length"],
        "target_length": run["target_length"],
        "pad_id": PAD_ID,
        "unk_id": UNK_ID,
        "start_id": START_ID,
        "end_id": END_ID,
        "quantize": quantize,
    }


# ---------------------------------------------------------------------------
# Keras' reference outputs


def write_reference(
    path: str,
    model,
    tokenizer,
    pairs: Sequence[tuple[str, str]],
    source_length: int,
    target_length: int,
    beam_width: int = 1,
) -> None:
    """Writes Keras' decoding and teacher-forced logits of ``pairs`` to ``path`` (.npz)."""
    from keras_seq import decoding

    sources = [s for s, _ in pairs]
    source_ids = tokenizer.encode(sources, source_length).numpy()
    greedy = tf.function(lambda ids: decoding.greedy_decode(model, ids, target_length),
                         autograph=False)
    keras_ids = greedy(source_ids).numpy()
    decoder_inputs = np.concatenate(
        [np.full((len(pairs), 1), START_ID, np.int32), keras_ids[:, :-1]], axis=1
    )
    logits = np.asarray(
        model({"encoder_inputs": source_ids, "decoder_inputs": decoder_inputs}, training=False),
        np.float32,
    )
    # Steps up to and including [END]: after it, decoding only pads.
    live = np.cumsum(keras_ids == END_ID, axis=1) - (keras_ids == END_ID) == 0
    rows, steps = np.nonzero(live)
    keep = np.arange(len(rows)) < _MAX_REFERENCE_LOGITS // max(1, logits.shape[-1])
    arrays = {
        "sources": np.array(sources, dtype=str),
        "targets": np.array([t for _, t in pairs], dtype=str),
        "source_ids": source_ids.astype(np.int32),
        "keras_ids": keras_ids.astype(np.int32),
        "keras_outputs": _strings(tokenizer.detokenize(keras_ids)),
        "keras_logits": logits[rows[keep], steps[keep]],
        "logit_rows": rows[keep].astype(np.int32),
        "logit_steps": steps[keep].astype(np.int32),
    }
    if beam_width > 1:
        beam_ids, _ = tf.function(
            lambda ids: decoding.beam_search(model, ids, target_length, beam_width),
            autograph=False,
        )(source_ids)
        arrays["keras_beam_ids"] = beam_ids.numpy().astype(np.int32)
        arrays["keras_beam_outputs"] = _strings(tokenizer.detokenize(beam_ids))
    np.savez(path, **arrays)


def _strings(tensor) -> np.ndarray:
    return np.array([s.decode("utf-8") for s in tensor.numpy()], dtype=str)
