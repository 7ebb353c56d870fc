"""``keras-seq verify``: run every exported artifact without keras_seq, compare with Keras.

Keras-free (it reads the export's files and runs `keras_seq.export`'s
``_verify_worker.py`` as a script): ``keras-seq verify`` runs without
importing TensorFlow or Keras. `keras_seq.export` re-exports `verify` and
`verification_table`.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile

from keras_seq._unused_imports import python_command
from keras_seq._validation import ArgumentValueError
from keras_seq.folders import export_manifest_path

_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "export", "_verify_worker.py")
# A quantized artifact may flip a few near-ties of the argmax, no more; an
# integer-only one computes every activation in 8 (16) bits, and may flip more.
QUANTIZED_MIN_STRING_MATCH = 0.995
INTEGER_MIN_STRING_MATCH = {"int8": 0.95, "int16x8": 0.99}


def minimum_match(quantize) -> float:
    """The share of examples an artifact of ``quantize`` must decode (label,
    tag, choose) as Keras does."""
    if quantize is None:
        return 1.0
    return INTEGER_MIN_STRING_MATCH.get(quantize, QUANTIZED_MIN_STRING_MATCH)
_ROW_KEYS = (
    "artifact",
    "format",
    "provider",
    "quantize",
    "size_bytes",
    "ops",
    "max_abs_logit_error",
    "string_match",
    "exact_match",
    "latency_ms_batch1",
)
# A language model's rows also carry these (see `verify`).
_LM_ROW_KEYS = ("task", "token_agreement", "ms_per_token", "keras_ms_per_token")
# And a classifier's these.
_CLASSIFIER_ROW_KEYS = ("task", "max_abs_probability_error")
# And a tagger's these.
_TAGGER_ROW_KEYS = ("task", "max_abs_probability_error", "token_agreement")
# Each kind of export's further keys (the manifest's "check").
_ROW_EXTRAS = {"generation": _LM_ROW_KEYS, "labels": _CLASSIFIER_ROW_KEYS,
               "tags": _TAGGER_ROW_KEYS}
# An export written before its manifest named its check: by its task.
_CHECK_OF_TASK = {"lm": "generation", "classify": "labels", "tag": "tags"}
# What an artifact does to an example, in a failure's words.
_DOES = {"labels": "labels", "tags": "tags"}
# And a streaming translator's (``tflite_stream/``) these.
_STREAM_ROW_KEYS = ("latency_ms_per_token", "emitted_before_source_end")
# A float artifact's probabilities may differ from Keras' by rounding, no more.
FLOAT_MAX_PROBABILITY_ERROR = 1e-4


def verify(
    out_dir: str | os.PathLike, json_path: str | os.PathLike | None = None, timeout: float = 1800
) -> dict:
    """Checks every artifact of an `export_run` folder against Keras' reference outputs.

    A fresh Python process that cannot import keras_seq (a meta-path finder
    refuses it) loads each artifact listed in ``manifest.json`` and decodes
    the held-out examples of ``reference.npz``: the SavedModel through its
    ``serving_default`` signature (strings in, strings out); TFLite files
    (with ai_edge_litert) and ONNX files (with onnxruntime) through the
    encoder and decoder-step models in a greedy loop in NumPy, tokenizing and
    detokenizing with the vocabulary files next to them. It also feeds Keras'
    greedy tokens to the decoder step (and the forward-pass model, where there
    is one) and compares the logits with Keras' teacher-forced logits. The
    SavedModel has no logits output: its logit error is `None`. Sizes are the
    SavedModel folder, or the encoder and decoder step of a host-side folder;
    latencies are the median of 7 runs on one example (the signature call, or
    the encoder plus the greedy loop). An ONNX artifact is run on every
    execution provider onnxruntime offers in that process (its CPU provider
    first; each session takes the CPU provider for the nodes another one does
    not), one row per provider, each checked alone. A monotonic translator's
    streaming steps (``tflite_stream/``) are fed each source one token per
    chunk through the host loop of `tflite_streaming_translate`; its row adds
    ``latency_ms_per_token`` (the whole stream's time over the tokens it
    emitted) and ``emitted_before_source_end`` (the share of the output out
    before the last source token arrived); it has no logit error.

    An artifact fails if it is float and decodes any example differently from
    Keras (greedy, or the beam search the SavedModel was exported with), if it
    is quantized and agrees on fewer than 99.5% of the examples (an
    integer-only one: ``int16x8`` 99%, ``int8`` 95%; `minimum_match`), or if
    its host tokenizer gives other ids than Keras'. An integer file takes a
    batch of one, each input padded with zeros to its static length: the
    host runs it row by row.

    A language model's export (``lm_step*.tflite``, and a recurrent one's
    streaming ONNX ``lm_stream.onnx``, fed one token per call) is run in the
    generation loop of `keras_seq.decoding.sample` at temperature 0 (the
    prompt fed token by token, the Transformer's cache restarted as there), in
    NumPy:
    ``string_match`` is the fraction of prompts whose whole continuation (200
    characters) equals Keras' greedy one; ``token_agreement`` the fraction of
    positions where the step, fed Keras' tokens, chooses Keras' next token;
    ``max_abs_logit_error`` is measured along Keras' tokens; ``exact_match``
    is None. ``ms_per_token`` is one prompt's generation time (batch 1)
    divided by the characters generated, beside ``keras_ms_per_token``,
    Keras' own (measured at export, `keras_seq.decoding.sample` compiled in
    one `tf.function`). The float step fails unless every continuation equals
    Keras'; a quantized one, unless ``token_agreement`` is at least 99.5%.

    A classifier's export (``classifier/1``, ``tflite*/classifier.tflite``,
    ``onnx/classifier.onnx``) labels the held-out texts of ``reference.npz``
    (the SavedModel from the strings, the others from the host tokenizer's
    ids): ``string_match`` is the fraction labelled as Keras labels them,
    ``exact_match`` the accuracy, ``max_abs_probability_error`` the largest
    difference from Keras' probabilities. A float artifact fails unless every
    label equals Keras' and its probabilities are within 1e-4; a quantized
    one, unless it agrees on at least 99.5% of the texts.

    A tagger's export (``tagger/1``, ``tflite*/tagger.tflite``) tags the
    held-out sentences (the SavedModel from the strings, the TFLite file from
    the ids of its folder's vocabularies): ``string_match`` is the fraction
    of sentences tagged exactly as Keras tags them, ``token_agreement`` the
    fraction of tokens, ``exact_match`` the token accuracy against the gold
    tags, ``max_abs_probability_error`` the largest difference from Keras'
    probabilities. A float artifact fails unless every tag equals Keras' and
    its probabilities are within 1e-4; a quantized one, unless it agrees on
    at least 99.5% of the tokens.

    Args:
        out_dir: a folder written by `export_run` (``keras-seq export``).
        json_path: where to write ``{"artifacts": [...]}`` (rows with the keys
            ``artifact, format, provider, quantize, size_bytes, ops,
            max_abs_logit_error, string_match, exact_match,
            latency_ms_batch1``, and for a language model ``task,
            token_agreement, ms_per_token, keras_ms_per_token``, for a
            classifier ``task, max_abs_probability_error``; ``provider``
            is the onnxruntime execution provider of an ONNX row, None for
            the others; ``ops`` the TFLite operators or ONNX op types), or
            `None`.
        timeout: seconds the worker process may take.

    Returns:
        ``{"artifacts": rows, "failures": [messages], "passed": bool}``.
    """
    out_dir = os.fspath(out_dir)
    manifest_path = export_manifest_path(out_dir, "verify")
    with open(manifest_path, encoding="utf-8") as f:
        manifest = json.load(f)
    if not manifest.get("reference"):
        raise ArgumentValueError(
            "verify", f"{out_dir} has no reference outputs (the run records no held-out "
            "examples); nothing to compare the artifacts with."
        )
    records, failures = _run_worker(out_dir, manifest, timeout)
    check = manifest.get("check") or _CHECK_OF_TASK.get(manifest.get("task"), "translation")
    rows = []
    for record in records:
        extra = _ROW_EXTRAS.get(check, ())
        if record.get("format") == "tflite_stream":
            extra = _STREAM_ROW_KEYS
        rows.append({key: record.get(key) for key in _ROW_KEYS + extra})
        failures.extend(record.get("problems", []))
        if record.get("string_match") is None:
            continue
        name = record["artifact"]
        if record.get("provider"):
            name += f" on {record['provider']}"
        minimum = minimum_match(record["quantize"])
        if check in ("generation", "tags") and record["quantize"] is not None:
            if record["token_agreement"] < minimum:
                chooses = ("chooses Keras' next character" if check == "generation" else
                           "gives Keras' tag")
                failures.append(
                    f"{name}: {chooses} at {record['token_agreement']:.2%} of the "
                    f"{'positions' if check == 'generation' else 'tokens'} (needs "
                    f"{minimum:.1%})"
                )
            continue
        error = record.get("max_abs_probability_error")
        if record["quantize"] is None and error is not None and (
            error > FLOAT_MAX_PROBABILITY_ERROR
        ):
            failures.append(f"{name}: its probabilities differ from Keras' by up to "
                            f"{error:.2e} (allowed: {FLOAT_MAX_PROBABILITY_ERROR:.0e})")
        if record["string_match"] < minimum:
            shown = "; ".join(
                f"{m['source']!r}: Keras {m['keras']!r}, artifact {m['artifact']!r}"
                for m in record["mismatches"]
            )
            does = _DOES.get(check, "decodes")
            failures.append(
                f"{name}: {does} {record['string_match']:.2%} of "
                f"{record['examples']} examples as Keras does (needs {minimum:.1%}); "
                f"e.g. {shown}"
            )
    if json_path is not None:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump({"artifacts": rows}, f, indent=2)
            f.write("\n")
    return {"artifacts": rows, "failures": failures, "passed": not failures}


def _run_worker(out_dir, manifest, timeout):
    with tempfile.TemporaryDirectory() as scratch:
        results_path = os.path.join(scratch, "results.jsonl")
        # On TensorFlow: the worker's TensorFlow imports Keras, which on
        # another backend would import that backend too.
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow"}
        done = subprocess.run(
            [*python_command(path=_WORKER), os.path.abspath(out_dir), results_path],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=scratch,
            env=env,
        )
        lines = []
        if os.path.isfile(results_path):
            with open(results_path, encoding="utf-8") as f:
                lines = [json.loads(line) for line in f if line.strip()]
    records = [line for line in lines if "running" not in line]
    failures = []
    if done.returncode != 0:
        running = [line["running"] for line in lines if "running" in line]
        where = f" while running {running[-1]}" if len(running) > len(records) else ""
        failures.append(
            f"the verify worker exited with code {done.returncode}{where}: "
            f"{done.stderr.strip()[-2000:]}"
        )
    finished = {r["artifact"] for r in records}
    for entry in manifest["artifacts"]:
        if entry["artifact"] not in finished:
            records.append({**entry, "problems": [f"{entry['artifact']}: not verified"]})
    return records, failures


def verification_table(result: dict) -> str:
    """The rows of `verify` as a text table, one artifact a line."""
    tasks = {row.get("task") for row in result["artifacts"]}
    if "lm" in tasks:
        return _language_model_table(result)
    # A classifier's or a tagger's rows: labels or tags and probabilities
    # against Keras'.
    tags = "tag" in tasks
    classify = "classify" in tasks or tags
    header = (
        "artifact", "format", "quantize", "size",
        "max|prob err|" if classify else "max|logit err|",
        "same tags as Keras" if tags else "same label as Keras" if classify else "vs Keras",
        "token accuracy" if tags else "accuracy" if classify else "vs targets",
        "batch-1 ms", "ops",
    )
    error = "max_abs_probability_error" if classify else "max_abs_logit_error"
    lines = [header]
    for row in result["artifacts"]:
        lines.append((
            _label(row),
            row["format"],
            row["quantize"] or "-",
            _size(row["size_bytes"]),
            _error(row.get(error)),
            _percent(row["string_match"]),
            _percent(row["exact_match"]),
            _milliseconds(row["latency_ms_batch1"]),
            _ops(row),
        ))
    return _aligned(lines)


def _language_model_table(result: dict) -> str:
    """The rows of a language model's export: continuations and ms per token."""
    header = (
        "artifact", "quantize", "size", "max|logit err|", "same text as Keras",
        "next-token agreement", "ms/token", "Keras ms/token", "ops",
    )
    lines = [header]
    for row in result["artifacts"]:
        lines.append((
            _label(row),
            row["quantize"] or "-",
            _size(row["size_bytes"]),
            _error(row["max_abs_logit_error"]),
            _percent(row["string_match"]),
            _percent(row.get("token_agreement")),
            "-" if row.get("ms_per_token") is None else f"{row['ms_per_token']:.3f}",
            "-" if row.get("keras_ms_per_token") is None else f"{row['keras_ms_per_token']:.3f}",
            _ops(row),
        ))
    return _aligned(lines)


def _aligned(lines) -> str:
    """Lines of cells, every column but the last (the operators, long) padded to its width."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]) - 1)]
    return "\n".join(
        "  ".join([*(v.ljust(w) for v, w in zip(line, widths)), line[-1]]).rstrip()
        for line in lines
    )


def _error(value) -> str:
    return "-" if value is None else f"{value:.2e}"


def _milliseconds(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ops(row) -> str:
    return ",".join(row["ops"]) if row["ops"] else "-"


def _label(row) -> str:
    """The artifact, and the execution provider of an ONNX row (``onnx [CPU]``)
    or how a streaming translator streams."""
    provider = row.get("provider")
    if row.get("emitted_before_source_end") is not None:
        return (f"{row['artifact']} ({row['emitted_before_source_end']:.0%} out before the "
                f"source ends, {row['latency_ms_per_token']:.2f} ms/token)")
    if not provider:
        return row["artifact"]
    return f"{row['artifact']} [{provider.removesuffix('ExecutionProvider')}]"


def _size(size):
    if size is None:
        return "-"
    return f"{size / 2**20:.2f} MB" if size >= 2**20 else f"{size / 2**10:.1f} kB"


def _percent(value):
    return "-" if value is None else f"{value:.2%}"
