"""Exporting a ``keras-seq train`` run folder, with Keras' reference outputs."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence

from keras_seq._backend import START_UNDER_TENSORFLOW, require_tensorflow
from keras_seq._validation import (
    Arg,
    ArgumentValueError,
    check_bool,
    check_positive_int,
    check_selection,
)
from keras_seq.export._artifacts import write_json
from keras_seq.export._checks import QUANTIZATIONS
from keras_seq.export._progress import Progress
from keras_seq.export.calibration import Calibration
from keras_seq.export.integer_tflite import is_integer
from keras_seq.folders import MANIFEST_FILE, check_export_destination
from keras_seq.recipes.recipe import CALIBRATION_EXAMPLES
from keras_seq.run_config import recorded_config
from keras_seq.training.locking import folder_lock

FORMATS = ("savedmodel", "tflite", "onnx")


def export_run(
    run_dir: str | os.PathLike,
    out: str | os.PathLike,
    formats: Sequence[str] | None = None,
    beam_width: int = 1,
    quantize: Sequence[str] = (),
    examples: int = 200,
    overwrite: bool = False,
    verbose: bool = False,
    calibration_examples: int = CALIBRATION_EXAMPLES,
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
    `keras_seq.run_folder.RunFolder.held_out_pairs`); for a run
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
        quantize: any of ``"dynamic"`` (int8 weights), ``"float16"``, and
            the integer-only ``"int8"`` and ``"int16x8"`` (int16
            activations) (every op an integer kernel, batch 1, sources
            padded to the run's ``source_length``;
            `keras_seq.export.integer_tflite`).
        examples: held-out examples in the reference outputs (at most).
        overwrite: replace an existing, non-empty ``out``.
        verbose: print one line on stderr as each artifact starts and one
            when it is written, with its seconds (``keras-seq export`` does).
        calibration_examples: the examples of the run's training split that
            calibrate each integer file: training texts or sources, and for a
            step the inputs it is fed over them (a decoder step: up to 8 per
            source; a language model's step: about this many tokens;
            `keras_seq.export.calibration`).

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
    if not isinstance(quantize, str) and quantize is not None:
        quantize = tuple(quantize)
    quantize = tuple(
        check_selection(where, "quantize", quantize, QUANTIZATIONS, allow_empty=True,
                        allow_single=True)
    )
    beam_width = check_positive_int(where, "beam_width", beam_width)
    examples = check_positive_int(where, "examples", examples)
    calibration_examples = check_positive_int(where, "calibration_examples",
                                              calibration_examples)
    overwrite = check_bool(where, "overwrite", overwrite)
    progress = Progress(check_bool(where, "verbose", verbose))
    out = os.path.abspath(os.fspath(out))
    with folder_lock(out, "export"):
        return _export_run(where, run_dir, out, formats, beam_width, quantize, examples,
                           overwrite, progress, calibration_examples)


def _export_run(where, run_dir, out, formats, beam_width, quantize, examples, overwrite,
                progress, calibration_examples):
    from keras_seq import recipes
    from keras_seq.run_folder import read_run

    check_export_destination(out, overwrite, where)
    folder = read_run(os.fspath(run_dir), where)
    recipe = recipes.recipe_of_run(folder.config)
    if formats is not None and not set(formats) <= set(recipe.formats):
        raise ArgumentValueError(
            where, f"a {recipe.noun}'s run (", Arg("task", recipe.name), ") exports "
            f"{recipe.formats_described or ', '.join(map(repr, recipe.formats))}; received ",
            Arg("formats", list(formats)), ".")
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.partial-", dir=parent)
    try:
        calibration = Calibration(
            lambda: recipe.training_examples(recorded_config(folder.config)),
            calibration_examples)
        if any(is_integer(mode) for mode in quantize):
            calibration.training()  # data that is gone: said before any conversion
        written, manifest = recipe.export(folder, staging, formats, beam_width, quantize,
                                          examples, progress, calibration)
        written["manifest"] = os.path.join(staging, MANIFEST_FILE)
        write_json(written["manifest"], manifest)
        _swap_in(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {key: os.path.join(out, os.path.relpath(path, staging)) for key, path in written.items()}


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
