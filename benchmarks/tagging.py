"""Sequence tagging on UD English EWT: ``keras-seq train --task tag`` with its defaults.

Trains on ``train.tsv`` and tests on ``dev.tsv`` of ``../shared/data/ud_english_ewt``
(the official test split is kept apart), through the command line as a user
runs it, and prints the run's token accuracy, macro-F1, accuracy on words
outside the vocabulary and training time, beside two baselines computed here
from the same files: the most frequent tag of each word (the most frequent
tag overall for an unknown word) and that tag for every token.

    python benchmarks/tagging.py [--data-dir DIR] [--seeds 0 1 2] [--keep DIR] [-- extra train flags]

``--keep DIR`` keeps the run folders in DIR (new or empty), and also times
``keras-seq export`` and ``keras-seq verify`` of the first.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, "..", "..", "shared", "data", "ud_english_ewt")


def read(path):
    sentences, sentence = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                if sentence:
                    sentences.append(sentence)
                sentence = []
            elif not line.startswith("#"):
                token, tag = line.split("\t")
                sentence.append((token, tag))
    if sentence:
        sentences.append(sentence)
    return sentences


def baselines(train, test):
    """Accuracy of the most frequent tag per word, and of the most frequent tag."""
    per_word = collections.defaultdict(collections.Counter)
    overall = collections.Counter()
    for sentence in train:
        for token, tag in sentence:
            per_word[token][tag] += 1
            overall[tag] += 1
    top = overall.most_common(1)[0][0]
    tokens = [(t, g) for s in test for t, g in s]
    word = sum((per_word[t].most_common(1)[0][0] if t in per_word else top) == g
               for t, g in tokens)
    return word / len(tokens), sum(g == top for _, g in tokens) / len(tokens)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=DEFAULT_DATA)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--keep", help="keep the runs in this folder, and export and verify one")
    parser.add_argument("extra", nargs="*", help="further `keras-seq train` flags (after --)")
    args = parser.parse_args()
    train_path = os.path.join(args.data_dir, "train.tsv")
    test_path = os.path.join(args.data_dir, "dev.tsv")
    word_baseline, tag_baseline = baselines(read(train_path), read(test_path))
    print(f"most frequent tag per word: {word_baseline:.4f}; most frequent tag: "
          f"{tag_baseline:.4f}")
    with tempfile.TemporaryDirectory() as scratch:
        out = args.keep or scratch
        for seed in args.seeds:
            command = ["keras-seq", "train", "--task", "tag", "--data", train_path,
                       "--test-data", test_path, "--out", out, "--name", f"seed{seed}",
                       "--seed", str(seed), *args.extra]
            subprocess.run(command, check=True, stdout=sys.stderr)
            with open(os.path.join(out, f"seed{seed}", "metrics.json"), encoding="utf-8") as f:
                metrics = json.load(f)
            seconds = metrics["seconds"]
            print(json.dumps({
                "seed": seed, "flags": args.extra,
                "token_accuracy": round(metrics["token_accuracy"], 4),
                "macro_f1": round(metrics["macro_f1"], 4),
                "unknown_word_accuracy": round(metrics["unknown_word_accuracy"], 4),
                "unknown_words": metrics["unknown_words"],
                "test_tokens": metrics["test_tokens"],
                "parameters": metrics["config"]["parameters"],
                "train_seconds": round(seconds["train"]),
                "total_seconds": round(seconds["total"]),
            }), flush=True)
        if args.keep:


            run = os.path.join(out, f"seed{args.seeds[0]}")
            for argv in (["export", run, os.path.join(out, "export")],
                         ["verify", os.path.join(out, "export")]):
                start = time.perf_counter()
                done = subprocess.run(["keras-seq", *argv], capture_output=True, text=True)
                print(f"keras-seq {argv[0]}: exit {done.returncode} in "
                      f"{time.perf_counter() - start:.0f} s\n{done.stdout}", flush=True)


if __name__ == "__main__":
    main()
