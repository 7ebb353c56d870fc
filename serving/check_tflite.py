"""Check the TFLite files of an export: builtin ops only, and one translation.

Usage:

    python serving/check_tflite.py exported/tflite [--text "21 Nov 2026"]

For every ``*.tflite`` in the folder it lists the operators (while-loop bodies
included) and fails if any is a custom or Flex op. Then it translates ``--text``
the way an app would: tokenize on the host with the exported vocabulary, run
``encoder.tflite`` once and ``decoder_step.tflite`` in a greedy loop, and
detokenize; and it checks ``seq2seq.tflite`` (the teacher-forced forward pass)
against the same tokens.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="the tflite/ folder written by export_run")
    parser.add_argument("--text", action="append", help="text to translate (repeatable)")
    args = parser.parse_args(argv)

    from keras_seq import text
    from keras_seq.export import run_tflite, tflite_greedy_decode, tflite_op_names

    flatbuffers = {}
    for path in sorted(glob.glob(os.path.join(args.folder, "*.tflite"))):
        with open(path, "rb") as f:
            flatbuffers[os.path.basename(path)] = f.read()
        ops = sorted(tflite_op_names(flatbuffers[os.path.basename(path)]))
        custom = [op for op in ops if op.startswith("CUSTOM")]
        print(f"{os.path.basename(path)}: {len(ops)} builtin ops: {', '.join(ops)}")
        if custom:
            print(f"  NOT builtin-only: {custom}")
            return 1

    with open(os.path.join(args.folder, "export.json"), encoding="utf-8") as f:
        lengths = json.load(f)
    tokenizer = text.load_tokenizer(args.folder)
    texts = args.text or ["21 Nov 2026", "Saturday, 3rd of May 1999"]
    source_ids = tokenizer.encode(texts, lengths["source_length"]).numpy()
    ids = tflite_greedy_decode(
        flatbuffers["encoder.tflite"],
        flatbuffers["decoder_step.tflite"],
        source_ids,
        lengths["target_length"],
    )
    for source, output in zip(texts, tokenizer.detokenize(ids).numpy()):
        print(f"{source!r} -> {output.decode('utf-8')!r}")

    # The forward model scores the greedy tokens: each must be its argmax.
    decoder_inputs = np.concatenate(
        [np.full((len(texts), 1), lengths["start_id"], np.int32), ids[:, :-1]], axis=1
    )
    (logits,) = run_tflite(flatbuffers["seq2seq.tflite"], source_ids, decoder_inputs)
    ended = np.cumsum(ids == lengths["end_id"], axis=1) - (ids == lengths["end_id"]) > 0
    agree = np.all((np.argmax(logits, -1) == ids) | ended)
    print(f"seq2seq.tflite agrees with the step-by-step decoding: {bool(agree)}")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
