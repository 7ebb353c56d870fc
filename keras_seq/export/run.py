"""Exporting a ``keras-seq train`` run folder, with Keras' reference outputs."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from keras_seq._backend import START_UNDER_TENSORFLOW, require_tensorflow
from keras_seq._validation import check_bool, check_positive_int, check_selection
from keras_seq.export._checks import QUANTIZATIONS
from keras_seq.export._progress import Progress
from keras_seq.export.classifier_export import export_classifier
from keras_seq.export.language_model_export import LM_FORMATS, export_language_model
from keras_seq.export.onnx_export import convert_decoder_steps_to_onnx, convert_seq2seq_to_onnx
from keras_seq.export.saved_model import export_saved_model
from keras_seq.export.streaming_translation import (
    convert_streaming_translator_to_tflite,
    is_monotonic_translator,
)
from keras_seq.export.tflite_export import (
    convert_decoder_steps_to_tflite,
    convert_seq2seq_to_tflite,
)
from keras_seq.folders import MANIFEST_FILE, check_export_destination
from keras_seq.reserved_tokens import END_ID, PAD_ID, START_ID, UNK_ID
from keras_seq.training.locking import folder_lock

FORMATS = ("savedmodel", "tflite", "onnx")
REFERENCE_FILE = "reference.npz"
HOST_FILE = "export.json"
_SERVING_MODEL_NAME = "translator"
# Keras logits are stored for the first examples only, up to this many floats
# (64 MB): enough to measure the numeric error, small for any vocabulary.
_MAX_REFERENCE_LOGITS = 16 * 2**20


def export_run(
    run_dir: str | os.PathLike,
    out: str | os.PathLike,
    formats: Sequence[str] | None = None,
    beam_width: int = 1,
    quantize: Sequence[str] = (),
    examples: int = 200,
    overwrite: bool = False,
    verbose: bool = False,
) -> dict[str, str]:
    """Exports the model of a ``keras-seq train`` run folder, and Keras' outputs.

    Reads ``model.keras`` (``safe_mode=True``), the tokenizer (``vocab.txt``,
    ``tokenizer.json``) and the lengths in ``metrics.json``'s ``config``, and
    writes under ``out``:

    - ``"savedmodel"``: ``translator/1/``, a SavedModel from `export_saved_model`
      (strings in, strings out), in the version layout of TF Serving's model
      base path ``out/translator``;
    - ``"tflite"``: ``tflite/seq2seq.tflite`` (`convert_seq2seq_to_tflite`),
      ``tflite/encoder.tflite`` and ``tflite/decoder_step.tflite``
      (`convert_decoder_steps_to_tflite`);
    - ``"onnx"``: ``onnx/seq2seq.onnx``, ``onnx/encoder.onnx`` and
      ``onnx/decoder_step.onnx``, the same three models in ONNX, each
      recurrent layer one native node (`convert_to_onnx`);
    - each ``quantize`` mode: ``tflite_<mode>/encoder.tflite`` and
      ``decoder_step.tflite``, quantized;
    - ``reference.npz``: Keras' outputs on held-out examples (see below), and
      ``manifest.json``: the artifacts written, for ``keras-seq verify``.

    ``out`` must be new or an empty folder; with ``overwrite=True`` an
    existing ``out`` is replaced whole (never merged: no file of an earlier
    export stays). The export is written to a temporary folder beside ``out``
    and renamed to ``out`` only when complete, so an export that fails leaves
    what was at ``out`` untouched.

    Every host-side folder (TFLite, ONNX) also holds the tokenizer files and
    ``export.json`` (lengths and special ids): a device tokenizes and runs the
    decoding loop itself.

    A language-model run (``keras-seq train --task lm``) exports its
    generation step instead (`keras_seq.export.language_model_export`):
    ``lm_step.tflite`` (`convert_language_model_step_to_tflite`: one token
    and the recurrent state or the Transformer's key/value caches of the
    run's ``context`` positions in, the next token's logits and the new
    state out), ``lm_step_<mode>.tflite`` for each ``quantize`` mode, for a
    recurrent model ``lm_stream.onnx`` (``"onnx"``: its `streaming_model` in
    ONNX, chunks of tokens of any length and the states in, the logits and the
    new states out, one native node per recurrent layer), the tokenizer files
    and ``export.json``, and in ``reference.npz`` Keras' greedy continuation
    (200 characters) of up to 20 prompts spread over the run's held-out text
    (``test.txt``), with Keras' milliseconds per token.

    A classifier run (``keras-seq train --task classify``) exports
    (`keras_seq.export.classifier_export`) ``classifier/1/`` (``"savedmodel"``,
    `export_classifier_saved_model`: strings in, ``labels`` and
    ``probabilities`` out), ``tflite/classifier.tflite`` (``"tflite"``,
    `convert_classifier_to_tflite`: token ids in, probabilities out),
    ``onnx/classifier.onnx`` (``"onnx"``), ``tflite_<mode>/classifier.tflite``
    for each ``quantize`` mode, each host-side folder with the tokenizer files
    and ``export.json`` (with the labels), and in ``reference.npz`` the first
    ``examples`` texts of its ``test.tsv`` with Keras' ``token_ids``,
    ``keras_probabilities`` and ``keras_labels``, and the ``targets``.

    The held-out examples are the first ``examples`` pairs of the run's test
    split as the run recorded it (``test.tsv``,
    `keras_seq.training.run_folder.RunFolder.held_out_pairs`); for a run
    without that file, the examples recorded in ``metrics.json``. ``reference.npz`` holds the
    ``sources``, the reference ``targets``, Keras' ``source_ids``, its greedy
    ``keras_ids`` and ``keras_outputs`` (and ``keras_beam_ids``,
    ``keras_beam_outputs`` when ``beam_width > 1``), and the logits of the
    teacher-forced Keras model along its own greedy output (``keras_logits``
    at ``logit_rows``, ``logit_steps``, for the steps up to ``[END]``).

    Args:
        run_dir: the run folder.
        out: the output folder: new or empty, or any folder with ``overwrite``.
        formats: any of ``"savedmodel"``, ``"tflite"``, ``"onnx"``; `None`:
            ``("savedmodel",)`` for a translation run, ``("savedmodel",
            "tflite")`` for a classifier; for a language-model
            run ``("tflite", "onnx")`` (recurrent) or ``("tflite",)``
            (Transformer), the formats it has.
        beam_width: decoding of the SavedModel: 1 (greedy) or a beam width.
        quantize: any of ``"dynamic"`` (int8 weights), ``"float16"``.
        examples: held-out examples in the reference outputs (at most).
        overwrite: replace an existing, non-empty ``out``.
        verbose: print one line on stderr as each artifact starts and one
            when it is written, with its seconds (``keras-seq export`` does).

    Returns:
        The paths written, keyed ``"savedmodel"``, ``"tflite"``,
        ``"tflite_encoder"``, ``"tflite_decoder_step"``, ``"onnx"``,
        ``"onnx_encoder"``, ``"onnx_decoder_step"``,
        ``"tflite_<mode>_encoder"``, ``"tflite_<mode>_decoder_step"``,
        with monotonic attention and ``"tflite"`` also
        ``"tflite_stream_encoder_step"`` and ``"tflite_stream_decoder_step"``
        (`convert_streaming_translator_to_tflite`, in ``tflite_stream/``),
        ``"reference"`` (when there are examples) and ``"manifest"``; for a
        language model ``"tflite"`` (``lm_step.tflite``), ``"tflite_<mode>"``,
        ``"onnx"`` (``lm_stream.onnx``), ``"reference"`` and ``"manifest"``;
        for a classifier ``"savedmodel"``, ``"tflite"``, ``"tflite_<mode>"``,
        ``"onnx"`` (the model files), ``"reference"`` and ``"manifest"``.

    Raises:
        FileNotFoundError: ``run_dir`` is not a run folder.
        FileExistsError: ``out`` is a file, or a non-empty folder and
            ``overwrite`` is False.
        FolderInUseError: another process is exporting to ``out``.
        ValueError: a bad argument, or a format or a beam width that a
            language-model run does not have.
    """
    require_tensorflow("keras_seq.export.export_run", START_UNDER_TENSORFLOW)
    where = "export_run"
    if formats is not None:
        formats = tuple(check_selection(where, "formats", formats, FORMATS, allow_single=True))
    quantize = tuple(
        check_selection(where, "quantize", quantize, QUANTIZATIONS, allow_empty=True,
                        allow_single=True)
    )
    beam_width = check_positive_int(where, "beam_width", beam_width)
    examples = check_positive_int(where, "examples", examples)
    overwrite = check_bool(where, "overwrite", overwrite)
    progress = Progress(check_bool(where, "verbose", verbose))
    out = os.path.abspath(os.fspath(out))
    with folder_lock(out, "export"):
        return _export_run(where, run_dir, out, formats, beam_width, quantize, examples,
                           overwrite, progress)


def _export_run(where, run_dir, out, formats, beam_width, quantize, examples, overwrite,
                progress):
    from keras_seq.training.run_folder import read_run

    check_export_destination(out, overwrite, where)
    folder = read_run(os.fspath(run_dir), where)
    if folder.is_language_model:
        _check_language_model_options(where, formats, beam_width)
    if folder.is_classifier and beam_width != 1:
        raise ValueError(
            f"{where}: `beam_width` is for translation runs (the SavedModel's decoding); a "
            f"classifier decodes nothing. Received beam_width={beam_width}."
        )
    translation = not (folder.is_language_model or folder.is_classifier)
    run = _load_run(where, os.fspath(run_dir)) if translation else None
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.partial-", dir=parent)
    try:
        if run is None:
            if folder.is_classifier:
                written, manifest = export_classifier(
                    folder, staging, formats, quantize, examples, _host_folder, progress)
            else:
                written, manifest = export_language_model(
                    folder, staging, formats, quantize, examples, _write_json, progress
                )
            written["manifest"] = os.path.join(staging, MANIFEST_FILE)
            _write_json(written["manifest"], manifest)
        else:
            written = _export_into(
                run, staging, formats or ("savedmodel",), beam_width, quantize, examples,
                progress,
            )
        _swap_in(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {key: os.path.join(out, os.path.relpath(path, staging)) for key, path in written.items()}


def _check_language_model_options(where, formats, beam_width):
    """A language-model run has a generation step and, if recurrent, a stream; no beam."""
    if formats is not None and not set(formats) <= set(LM_FORMATS):
        raise ValueError(
            f"{where}: a language-model run exports 'tflite' (lm_step.tflite) and, for a "
            f"recurrent model, 'onnx' (lm_stream.onnx); received formats={list(formats)}."
        )
    if beam_width != 1:
        raise ValueError(
            f"{where}: `beam_width` is for translation runs (the SavedModel's decoding); a "
            f"language-model run exports a generation step. Received beam_width={beam_width}."
        )


def _swap_in(staging, out):
    """Puts the complete export ``staging`` at ``out``, replacing what was there."""
    old = None
    if os.path.exists(out):
        old = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.old-", dir=os.path.dirname(out))
        os.rmdir(old)
        os.rename(out, old)
    try:
        os.rename(staging, out)
    except BaseException:
        if old is not None:
            os.rename(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _export_into(run, out, formats, beam_width, quantize, examples, progress):
    steps = []  # (paths written, manifest entry) of each artifact
    if "savedmodel" in formats:
        with progress.artifact(f"{_SERVING_MODEL_NAME}/1 (SavedModel)"):
            steps.append(_export_saved_model(run, out, beam_width))
    for mode in ([None] if "tflite" in formats else []) + list(quantize):
        with progress.artifact("tflite/" if mode is None else f"tflite_{mode}/"):
            steps.append(_export_tflite(run, out, mode))
    if "tflite" in formats and is_monotonic_translator(run["model"]):
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
    written["manifest"] = _write_manifest(run, out, [entry for _, entry in steps], written)
    return written


def _export_saved_model(run, out, beam_width):
    """``translator/1/``: strings in, strings out, for TF Serving."""
    path = export_saved_model(
        run["model"],
        run["tokenizer"],
        run["tokenizer"],
        os.path.join(out, _SERVING_MODEL_NAME, "1"),
        run["source_length"],
        run["target_length"],
        beam_width=beam_width,
    )
    entry = _artifact(out, path, "savedmodel", None)
    entry["beam_width"] = int(beam_width)
    return {"savedmodel": path}, entry


def _export_tflite(run, out, mode):
    """``tflite/`` (mode None: forward pass, encoder, decoder step) or ``tflite_<mode>/``."""
    name = "tflite" if mode is None else f"tflite_{mode}"
    folder = _host_folder(out, name, run["tokenizer"], _host_config(run, mode))
    encoder, decoder_step = convert_decoder_steps_to_tflite(
        run["model"], run["target_length"], quantize=mode
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
    return paths, _artifact(out, folder, "tflite", mode)


def _export_tflite_stream(run, out):
    """``tflite_stream/``: the monotonic translator's encoder and decoder
    steps, which read the source chunk by chunk and emit while it arrives."""
    folder = _host_folder(out, "tflite_stream", run["tokenizer"], _host_config(run, None))
    paths = {}
    for key, flatbuffer in convert_streaming_translator_to_tflite(run["model"]).items():
        path = os.path.join(folder, f"{key}.tflite")
        with open(path, "wb") as f:
            f.write(flatbuffer)
        paths[f"tflite_stream_{key}"] = path
    return paths, _artifact(out, folder, "tflite_stream", None)


def _export_onnx(run, out):
    """``onnx/``: forward pass, encoder and decoder step."""
    folder = _host_folder(out, "onnx", run["tokenizer"], _host_config(run, None))
    paths = {"onnx": convert_seq2seq_to_onnx(run["model"], os.path.join(folder, "seq2seq.onnx"))}
    paths["onnx_encoder"], paths["onnx_decoder_step"] = convert_decoder_steps_to_onnx(
        run["model"],
        os.path.join(folder, "encoder.onnx"),
        os.path.join(folder, "decoder_step.onnx"),
        run["target_length"],
    )
    return paths, _artifact(out, folder, "onnx", None)


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


def _write_manifest(run, out, artifacts, written):
    """``manifest.json``: what `keras_seq.export.verify` checks."""
    path = os.path.join(out, MANIFEST_FILE)
    _write_json(
        path,
        {
            "run_dir": os.path.basename(os.path.normpath(run["run_dir"])),
            "reference": REFERENCE_FILE if "reference" in written else None,
            "artifacts": artifacts,
            "source_length": run["source_length"],
            "target_length": run["target_length"],
        },
    )
    return path


def _load_run(where, run_dir):
    from keras_seq.training.run_folder import read_run

    run = read_run(run_dir, where, task="translate")
    return {
        "run_dir": run.path,
        "folder": run,
        "source_length": int(run.config["source_length"]),
        "target_length": int(run.config["target_length"]),
        "model": run.load_model(),
        "tokenizer": run.load_tokenizer(),
    }


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


def _host_folder(directory, name, tokenizer, host_config):
    """A folder for a host-side artifact, with what the host needs to tokenize:
    the tokenizer files and ``export.json`` (``host_config``)."""
    folder = os.path.join(directory, name)
    os.makedirs(folder, exist_ok=True)
    tokenizer.save(folder)
    _write_json(os.path.join(folder, HOST_FILE), host_config)
    return folder


def _artifact(directory, path, format, quantize):
    return {
        "artifact": os.path.relpath(path, directory).replace(os.sep, "/"),
        "format": format,
        "quantize": quantize,
    }


def _write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
        f.write("\n")


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
    greedy = tf.function(lambda ids: decoding.greedy_decode(model, ids, target_length))
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
            lambda ids: decoding.beam_search(model, ids, target_length, beam_width)
        )(source_ids)
        arrays["keras_beam_ids"] = beam_ids.numpy().astype(np.int32)
        arrays["keras_beam_outputs"] = _strings(tokenizer.detokenize(beam_ids))
    np.savez(path, **arrays)


def _strings(tensor) -> np.ndarray:
    return np.array([s.decode("utf-8") for s in tensor.numpy()], dtype=str)
