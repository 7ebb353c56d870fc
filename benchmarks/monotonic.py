"""Monotonic against soft attention, and the streaming translator's latency in LiteRT.

Trains `keras-seq train` runs that differ only in ``--attention`` on the main
job (dates) and on a task whose alignment is monotonic (doubling every vowel
of 16 to 30 letters: "abcde" -> "aabcdee"), scores each held-out split with
greedy decoding, and for the monotonic runs of the second task converts the
streaming translator (`keras_seq.export.convert_streaming_translator_to_tflite`)
and times `tflite_streaming_translate` with the source fed one token at a
time: milliseconds per emitted token, and the share of tokens emitted before
the source ended. Prints a Markdown table and writes JSON.

    python benchmarks/monotonic.py --out /tmp/monotonic.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ARMS = ("bahdanau", "monotonic_bahdanau", "monotonic_luong")


def vowel_data(path: str, pairs: int = 6000, seed: int = 0) -> None:
    """``source<TAB>target`` lines: 16-30 letters, and the same with every vowel doubled."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(pairs):
            text = "".join(rng.choice("abcdefghij") for _ in range(rng.randint(16, 30)))
            target = "".join(c * 2 if c in "aei" else c for c in text)
            f.write(f"{text}\t{target}\n")


def _train(work, name, task_args, attention):
    command = [sys.executable, "-m", "keras_seq.cli", "train", "--out", work, "--name", name,
               "--verbose", "0", "--attention", attention, *task_args]
    subprocess.run(command, check=True)
    with open(os.path.join(work, name, "metrics.json"), encoding="utf-8") as f:
        metrics = json.load(f)
    return {"greedy": metrics["test_exact_match"], "train_seconds": metrics["seconds"]["train"]}


def _streaming(run: str, sources: int = 100) -> dict:
    """Streams held-out sources one token per chunk; ms per emitted token."""
    import numpy as np
    import tensorflow as tf

    from keras_seq.export import convert_streaming_translator_to_tflite
    from keras_seq.export.streaming_translation import tflite_streaming_translate
    from keras_seq.recipes import read_run

    folder = read_run(run, "benchmark", task="translate")
    model, tokenizer, config = folder.load_model(), folder.load_tokenizer(), folder.config
    flatbuffers = convert_streaming_translator_to_tflite(model)
    from keras_seq import decoding
    from keras_seq.reserved_tokens import END_ID, START_ID

    steps = decoding.decoder_steps(model)

    def keras_greedy(ids):
        constants, state = steps.start(tf.constant(ids[None]), config["target_length"])
        tokens, token = [], START_ID
        while len(tokens) < config["target_length"] and (not tokens or tokens[-1] != END_ID):
            logits, state = steps.step(tf.constant([token]), tf.constant(len(tokens)),
                                       constants, state)
            token = int(np.argmax(np.asarray(logits)[0]))
            tokens.append(token)
        return tokens

    per_token, early, same, as_keras = [], [], 0, 0
    for source, target in folder.held_out_pairs(sources):
        ids = np.asarray(tokenizer.encode(tf.constant([source]), config["source_length"]))[0]
        ids = ids[ids != 0]
        started = time.perf_counter()
        tokens, emitted = tflite_streaming_translate(flatbuffers, np.split(ids, len(ids)),
                                                     config["target_length"])
        per_token.append((time.perf_counter() - started) * 1000 / max(1, len(tokens)))
        early.append(emitted[-2] / max(1, len(tokens)) if len(emitted) > 1 else 0.0)
        as_keras += tokens == keras_greedy(ids)
        text = tokenizer.detokenize(tf.constant([tokens], tf.int32)).numpy()[0].decode("utf-8")
        same += text == target
    return {"ms_per_token": statistics.median(per_token),
            "emitted_before_end": statistics.mean(early),
            "stream_exact_match": same / sources, "same_tokens_as_keras": as_keras / sources}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--work", default=None)
    args = parser.parse_args()
    if os.path.exists(args.out):
        parser.error(f"{args.out} exists; choose another --out")
    work = args.work or tempfile.mkdtemp(prefix="monotonic-")
    os.makedirs(work, exist_ok=True)
    vowels = os.path.join(work, "vowels.tsv")
    vowel_data(vowels)
    tasks = {"dates (main job)": [],
             "double the vowels, 16-30 letters": ["--data", vowels, "--epochs", "10"]}
    rows = []
    for task, task_args in tasks.items():
        for attention in ARMS:
            name = f"{len(rows):02d}"
            row = {"task": task, "attention": attention,
                   **_train(work, name, task_args, attention)}
            if attention.startswith("monotonic") and task_args:
                row.update(_streaming(os.path.join(work, name)))
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"rows": rows}, f, indent=1)
    print("\n| task | attention | greedy exact match | train s | stream ms/token "
          "| emitted before the source ended | stream = Keras greedy |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        stream = (f"{row['ms_per_token']:.2f} | {row['emitted_before_end']:.0%} "
                  f"| {row['same_tokens_as_keras']:.0%}" if "ms_per_token" in row else "- | - | -")
        print(f"| {row['task']} | {row['attention']} | {row['greedy']:.3f} "
              f"| {row['train_seconds']:.0f} | {stream} |")


if __name__ == "__main__":
    main()
