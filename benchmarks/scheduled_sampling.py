"""Teacher forcing against scheduled sampling (Bengio et al. 2015), greedy and beam.

Trains `keras-seq train` runs that differ only in ``--scheduled-sampling``
(and its schedule) on two tasks, the main job (dates) and one with longer
outputs (reversing strings of 16 to 30 letters), and scores each run's
held-out split with greedy decoding (the run's own ``test_exact_match``) and
with a beam of 4. Prints a Markdown table and writes JSON.

    python benchmarks/scheduled_sampling.py --out /tmp/ss.json [--seeds 1] [--first-seed 0]

With several seeds the table gives each arm's mean ± standard deviation.
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

ARMS = {
    "teacher forcing": [],
    "sampled, P=0.25 constant": ["--scheduled-sampling", "0.25"],
    "sampled, P=0.5 inverse sigmoid": ["--scheduled-sampling", "0.5", "--sampling-schedule",
                                       "inverse_sigmoid"],
}


def reversal_data(path: str, pairs: int = 6000, seed: int = 0) -> None:
    """``source<TAB>target`` lines: a string of 16-30 letters and its reverse."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(pairs):
            text = "".join(rng.choice("abcdefghij") for _ in range(rng.randint(16, 30)))
            f.write(f"{text}\t{text[::-1]}\n")


def _train(work: str, name: str, task_args: list[str], arm_args: list[str], seed: int) -> dict:
    command = [sys.executable, "-m", "keras_seq.cli", "train", "--out", work, "--name", name,
               "--seed", str(seed), "--verbose", "0", *task_args, *arm_args]
    started = time.perf_counter()
    subprocess.run(command, check=True)
    seconds = time.perf_counter() - started
    with open(os.path.join(work, name, "metrics.json"), encoding="utf-8") as f:
        metrics = json.load(f)
    return {"greedy": metrics["test_exact_match"], "seconds": seconds,
            "train_seconds": metrics["seconds"]["train"]}


def _beam(run: str, width: int = 4) -> float:
    from keras_seq.recipes import read_run
    from keras_seq.training import translate_texts

    pairs = read_run(run, "benchmark", task="translate").held_out_pairs(10_000)
    outputs = translate_texts(run, [s for s, _ in pairs], beam_width=width)
    return sum(o == t for o, (_, t) in zip(outputs, pairs)) / len(pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--work", default=None)
    args = parser.parse_args()
    if os.path.exists(args.out):
        parser.error(f"{args.out} exists; choose another --out")
    work = args.work or tempfile.mkdtemp(prefix="scheduled-sampling-")
    os.makedirs(work, exist_ok=True)
    reversal = os.path.join(work, "reverse.tsv")
    reversal_data(reversal)
    tasks = {"dates (main job)": [],
             "reversal, 16-30 letters": ["--data", reversal, "--epochs", "10"]}
    rows = []
    for task, task_args in tasks.items():
        for arm, arm_args in ARMS.items():
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                name = f"{len(rows):02d}"
                result = _train(work, name, task_args, arm_args, seed)
                result.update(task=task, arm=arm, seed=seed,
                              beam4=_beam(os.path.join(work, name)))
                rows.append(result)
                print(json.dumps(result), flush=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"rows": rows}, f, indent=1)
    print("\n| task | arm | seeds | greedy exact match | beam 4 exact match | train s |")
    print("|---|---|---|---|---|---|")
    for task in tasks:
        for arm in ARMS:
            runs = [row for row in rows if row["task"] == task and row["arm"] == arm]
            print(f"| {task} | {arm} | {len(runs)} | {_mean_std([r['greedy'] for r in runs])} "
                  f"| {_mean_std([r['beam4'] for r in runs])} "
                  f"| {statistics.mean(r['train_seconds'] for r in runs):.0f} |")


def _mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"

if __name__ == "__main__":
    main()
