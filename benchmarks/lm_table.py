"""Loss against wall time of `keras-seq train --task lm` runs, as Markdown tables.

Reads each run folder's ``history.csv`` (one row per epoch: steps, wall
seconds since the start of `train`, training loss, validation loss on the
held-out windows scored during training) and ``metrics.json`` (the loss over
the whole held-out text, the timings). Prints one summary table, then one
curve per run.

    python benchmarks/lm_table.py runs/lm-transformer-4x128-... runs/lm-rnn-lstm-...
"""

from __future__ import annotations

import argparse
import csv
import json
import os


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run folders written by keras-seq train --task lm")
    args = parser.parse_args()
    print("| run | model | parameters | steps | val_loss (whole held-out text) | val_perplexity "
          "| train s | evaluate s | total s |")
    print("|---|---|---|---|---|---|---|---|---|")
    curves = []
    for run in args.runs:
        with open(os.path.join(run, "metrics.json"), encoding="utf-8") as f:
            metrics = json.load(f)
        config, seconds = metrics["config"], metrics["seconds"]
        model = config["model"] + (f" {config['cell']}" if config["model"] == "rnn" else "")
        model += f", {config['layers']}x{config['units']}, context {config['context']}"
        print(f"| {os.path.basename(os.path.normpath(run))} | {model} | {config['parameters']:,} "
              f"| {metrics['steps']} | {metrics['val_loss']:.4f} | {metrics['val_perplexity']:.3f} "
              f"| {seconds['train']:.0f} | {seconds['evaluate']:.0f} | {seconds['total']:.0f} |")
        with open(os.path.join(run, "history.csv"), encoding="utf-8") as f:
            curves.append((run, list(csv.DictReader(f)), metrics))
    for run, rows, metrics in curves:
        print(f"\n{os.path.basename(os.path.normpath(run))}:\n")
        print("| step | wall s | train loss (epoch mean) | val loss (held-out windows) |")
        print("|---|---|---|---|")
        for row in rows:
            print(f"| {row['step']} | {float(row['wall_seconds']):.0f} | {float(row['loss']):.4f} "
                  f"| {float(row['val_loss']):.4f} |")
        print(f"| end | {metrics['seconds']['total']:.0f} | | {metrics['val_loss']:.4f} "
              "(whole held-out text) |")


if __name__ == "__main__":
    main()
