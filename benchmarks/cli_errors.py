"""Seconds from ``keras-seq ...`` to its error line, for the errors that need no model (not a test).

Each command runs as the installed console script in a fresh process (what a
user waits for: Python's start-up, the package's import, the check), on
files this script writes to a temporary folder; the rows run interleaved,
``--repetitions`` times, and the table gives the median and the exit status.
tests/test_cli.py checks that none of them imports TensorFlow.

    python benchmarks/cli_errors.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

CASES = [
    ("usage: --task lm --model mingru --cell gru",
     ["train", "--task", "lm", "--model", "mingru", "--cell", "gru"]),
    ("usage: --cell no-such-cell", ["train", "--cell", "no-such-cell"]),
    ("missing --data", ["train", "--task", "classify", "--data", "no/such.tsv"]),
    ("empty --data (classify)", ["train", "--task", "classify", "--data", "empty.tsv"]),
    ("tab-less --data (classify)", ["train", "--task", "classify", "--data", "no-tab.tsv"]),
    ("tab-less --data (translate)", ["train", "--data", "no-tab.tsv"]),
    ("too short --data (lm)", ["train", "--task", "lm", "--data", "short.txt"]),
    ("missing --init-from", ["train", "--task", "classify", "--data", "labels.tsv",
                             "--init-from", "no/such/run"]),
    ("translate: missing RUN_DIR", ["translate", "no/such/run", "x"]),
    ("export: missing RUN_DIR", ["export", "no/such/run", "out"]),
    ("export: OUT not empty", ["export", "no/such/run", "used"]),
    ("verify: not an export", ["verify", "no/such/export"]),
]


def _files(folder):
    with open(os.path.join(folder, "empty.tsv"), "w", encoding="utf-8"):
        pass
    with open(os.path.join(folder, "no-tab.tsv"), "w", encoding="utf-8") as f:
        f.write("a line without a tab\n")
    with open(os.path.join(folder, "short.txt"), "w", encoding="utf-8") as f:
        f.write("abc")
    with open(os.path.join(folder, "labels.tsv"), "w", encoding="utf-8") as f:
        f.writelines(f"{'ab'[i % 2]}\ttext {i}\n" for i in range(20))
    os.makedirs(os.path.join(folder, "used"))
    with open(os.path.join(folder, "used", "mine.txt"), "w", encoding="utf-8") as f:
        f.write("mine")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args()
    command = shutil.which("keras-seq")
    if command is None:
        parser.error("the keras-seq console script is not installed (pip install -e .)")
    folder = tempfile.mkdtemp(prefix="cli_errors-")
    _files(folder)
    times = {label: [] for label, _ in CASES}
    status = {}
    for repetition in range(args.repetitions):
        shift = repetition % len(CASES)
        for label, argv in CASES[shift:] + CASES[:shift]:
            start = time.perf_counter()
            done = subprocess.run([command, *argv], cwd=folder, capture_output=True, text=True)
            times[label].append(time.perf_counter() - start)
            status[label] = (done.returncode, done.stderr.strip().splitlines()[-1][:90])
    shutil.rmtree(folder, ignore_errors=True)
    print("| error | seconds (median) | exit | last line |\n|---|---|---|---|")
    for label, _ in CASES:
        code, line = status[label]
        print(f"| {label} | {statistics.median(times[label]):.2f} | {code} | {line} |")


if __name__ == "__main__":
    main()
