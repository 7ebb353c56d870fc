"""Exporting a classifier run (``keras-seq train --task classify``): strings in, labels out.

`export_classifier` writes, into the (staging) folder `export_run` gives it:

- ``classifier/1/`` (``"savedmodel"``): `export_classifier_saved_model`, strings
  in, ``labels`` and ``probabilities`` out, in TF Serving's version layout;
- ``tflite/classifier.tflite`` (``"tflite"``, `convert_classifier_to_tflite`),
  ``onnx/classifier.onnx`` (``"onnx"``) and ``tflite_<mode>/classifier.tflite``
  for each quantization mode: token ids in, probabilities out, each folder with
  the tokenizer files and ``export.json`` (the most tokens read, the padding
  and unknown ids, the labels) for the host's tokenizer;
- ``reference.npz``: held-out texts of the run's test split with Keras' ids,
  probabilities and labels, and the manifest entries `keras_seq.export.verify`
  checks.
"""

from __future__ import annotations

import os

import numpy as np

from keras_seq.export._artifacts import REFERENCE_FILE, host_folder
from keras_seq.export.integer_tflite import is_integer
from keras_seq.export.onnx_export import convert_to_onnx
from keras_seq.export.saved_model import export_classifier_saved_model
from keras_seq.export.tflite_export import classifier_probabilities, convert_classifier_to_tflite
from keras_seq.reserved_tokens import PAD_ID, UNK_ID

__all__ = ["CLASSIFIER_FILE", "CLASSIFIER_FORMATS", "export_classifier"]

CLASSIFIER_FILE = "classifier"
"""The stem of a classifier's files: ``classifier/1/``, ``tflite/classifier.tflite``, ..."""
CLASSIFIER_FORMATS = ("savedmodel", "tflite", "onnx")
"""The formats of a classifier run (`export_run`'s default: the first two)."""


def export_classifier(run, out: str, formats, quantize, examples: int, progress,
                      calibration=None):
    """Writes the artifacts, the host files and the reference of a classifier run into ``out``.

    Args:
        run: the `keras_seq.run_folder.RunFolder` of the run.
        out: the folder to write into (exists, empty).
        formats: any of `CLASSIFIER_FORMATS`; None: ``("savedmodel", "tflite")``.
        quantize: the quantization modes of the TFLite file.
        examples: at most this many held-out texts in ``reference.npz``.
        progress: the export's `keras_seq.export._progress.Progress`.
        calibration: the `keras_seq.export.calibration.Calibration` of the
            integer files (training texts, padded to ``source_length``).

    Returns:
        ``(written, manifest)``: the paths keyed ``"savedmodel"``, ``"tflite"``,
        ``"tflite_<mode>"``, ``"onnx"``, ``"reference"``, and the manifest's content.
    """
    from keras_seq.data import classification_ids

    formats = formats or CLASSIFIER_FORMATS[:2]
    from keras_seq.tasks import from_run

    model = from_run(run)
    tokenizer = model.preprocessor.tokenizer
    labels = list(model.preprocessor.labels)
    source_length = int(model.preprocessor.sequence_length)
    written, artifacts = {}, []

    def artifact(path, format, mode):
        artifacts.append({"artifact": os.path.relpath(path, out).replace(os.sep, "/"),
                          "format": format, "quantize": mode, "task": "classify"})

    if "savedmodel" in formats:
        with progress.artifact(f"{CLASSIFIER_FILE}/1 (SavedModel)"):
            written["savedmodel"] = export_classifier_saved_model(
                model, tokenizer, labels, os.path.join(out, CLASSIFIER_FILE, "1"),
                source_length)
        artifact(written["savedmodel"], "savedmodel", None)
    host = {"task": "classify", "source_length": source_length, "pad_id": PAD_ID,
            "unk_id": UNK_ID, "labels": labels}
    for mode in [None, *quantize] if "tflite" in formats else list(quantize):
        folder = host_folder(out, "tflite" if mode is None else f"tflite_{mode}", tokenizer,
                             {**host, "quantize": mode})
        path = os.path.join(folder, CLASSIFIER_FILE + ".tflite")
        with progress.artifact(os.path.relpath(path, out).replace(os.sep, "/")), \
                open(path, "wb") as f:
            f.write(convert_classifier_to_tflite(
                model, quantize=mode, representative_data=_calibration_ids(
                    calibration, tokenizer, source_length) if is_integer(mode) else None))
        written["tflite" if mode is None else f"tflite_{mode}"] = path
        artifact(folder, "tflite", mode)
    if "onnx" in formats:
        folder = host_folder(out, "onnx", tokenizer, {**host, "quantize": None})
        with progress.artifact(f"onnx/{CLASSIFIER_FILE}.onnx"):
            written["onnx"] = convert_to_onnx(classifier_probabilities(model),
                                              os.path.join(folder, CLASSIFIER_FILE + ".onnx"))
        artifact(folder, "onnx", None)

    test = run.held_out_labelled(examples)
    if test:
        with progress.artifact("reference.npz (Keras' labels)"):
            texts = [text for _, text in test]
            ids = classification_ids(tokenizer, texts, source_length).numpy().astype(np.int32)
            probabilities = np.asarray(classifier_probabilities(model)(ids, training=False),
                                       np.float32)
            written["reference"] = os.path.join(out, REFERENCE_FILE)
            np.savez(
                written["reference"],
                texts=np.array(texts, dtype=str),
                targets=np.array([label for label, _ in test], dtype=str),
                token_ids=ids,
                keras_probabilities=probabilities,
                keras_labels=np.array([labels[i] for i in probabilities.argmax(-1)], dtype=str),
            )
    manifest = {
        "task": "classify",
        "check": "labels",
        "run_dir": os.path.basename(os.path.normpath(run.path)),
        "reference": REFERENCE_FILE if test else None,
        "artifacts": artifacts,
        "source_length": source_length,
        "labels": labels,
    }
    return written, manifest



def _calibration_ids(calibration, tokenizer, source_length: int) -> np.ndarray:
    """Token ids ``(N, source_length)`` of the first training texts."""
    from keras_seq.data import classification_ids

    texts = [text for _, text in calibration.training()[: calibration.count]]
    ids = classification_ids(tokenizer, texts, source_length).numpy().astype(np.int32)
    return np.pad(ids, [(0, 0), (0, source_length - ids.shape[1])])
