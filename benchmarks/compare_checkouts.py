"""Speed of this checkout's layers against another checkout's, in one process.

A refactoring must not make a layer slower. Comparing two runs of
`recurrent.py` / `attention.py` (each a ratio against Keras) mixes in the
machine's drift between runs, which on a shared machine is larger than the
effect to detect. Here both versions are imported into one process (the other
checkout's package is copied to a temporary directory and renamed
``keras_seq_base``), given the same weights and timed in interleaved
repetitions on one backend (`recurrent.py`'s: TensorFlow with and without
``jit_compile``, JAX's ``jax.jit``, PyTorch eager); the ratio of medians
this / base is printed per layer, batch and mode.

Usage: ``python benchmarks/compare_checkouts.py --base ../other-checkout
[--backend tensorflow|jax|torch] [--only GRU LayerNormLSTM] [--batches 64 1]``
(``--base`` is a directory that holds a ``keras_seq/`` package).

``--commands`` compares the command line instead: the main job (``keras-seq
train`` with its defaults), ``translate`` of 200 dates, ``export`` and
``verify``, each checkout's own command in a fresh process (its directory
first on ``PYTHONPATH``), the two checkouts alternating for ``--repeats``
rounds; it prints each command's median seconds, the ratio this / base, and
each run's held-out exact match. ``--train-args "..."`` appends options to
``train`` (a tiny run: ``--train-args "--train-size 300 --units 16 --epochs
1"``), to time what a command costs besides its training.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import shutil
import statistics
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
RECURRENT = ["PeepholeLSTM", "CoupledGateLSTM", "GRU", "LayerNormLSTM", "MinGRU"]
OTHERS = ["MultiHeadAttention", "TransformerEncoder", "TransformerDecoder", "BahdanauAttention"]


def import_base(base_dir: str):
    """The other checkout's ``keras_seq.layers``, imported as ``keras_seq_base``."""
    source = pathlib.Path(base_dir) / "keras_seq"
    if not source.is_dir():
        raise SystemExit(f"--base: {base_dir} has no keras_seq/ package")
    root = pathlib.Path(tempfile.mkdtemp(prefix="keras_seq_base_"))
    target = root / "keras_seq_base"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    for path in target.rglob("*.py"):
        path.write_text(re.sub(r"\bkeras_seq\b", "keras_seq_base", path.read_text()))
    sys.path.insert(0, str(root))
    import keras_seq_base.layers as base_layers

    return base_layers


def _make(module, name):
    if name in RECURRENT:
        return getattr(module, name)(256, return_sequences=True)
    return {
        "MultiHeadAttention": lambda: module.MultiHeadAttention(num_heads=4, key_dim=32),
        "TransformerEncoder": lambda: module.TransformerEncoder(512, 4),
        "TransformerDecoder": lambda: module.TransformerDecoder(512, 4),
        "BahdanauAttention": lambda: module.BahdanauAttention(128),
    }[name]()


def _inputs(name, batch, rng):
    def normal(*shape):
        return rng.normal(size=shape).astype("float32")

    if name in RECURRENT:
        return [normal(batch, 100, 128)]
    if name == "BahdanauAttention":
        return [normal(batch, 128), normal(batch, 40, 128)]
    if name == "TransformerEncoder":
        return [normal(batch, 64, 128)]
    return [normal(batch, 64, 128), normal(batch, 64, 128)]


class _TwoInputs:
    """A recurrent benchmark step calls ``layer(x)``; the attention layers
    take two inputs, bound here so that `recurrent.py`'s steps serve both."""

    def __init__(self, layer, inputs, tensor):
        self.layer, self.rest = layer, [tensor(x) for x in inputs[1:]]
        self.trainable_variables = layer.trainable_variables
        self.non_trainable_variables = layer.non_trainable_variables
        self.trainable_weights = layer.trainable_weights

    def __call__(self, x, training=False):
        out = self.layer(x, *self.rest, training=training)
        return out[0] if isinstance(out, (tuple, list)) else out

    def stateless_call(self, trainable, non_trainable, x, training=False):
        return self.layer.stateless_call(trainable, non_trainable, x, *self.rest,
                                         training=training)


def _command(checkout: pathlib.Path) -> list[str]:
    """A checkout's ``keras-seq``: its console script's module, or the CLI package."""
    if (checkout / "keras_seq_command.py").is_file():
        return [sys.executable, "-m", "keras_seq_command"]
    return [sys.executable, "-m", "keras_seq.cli"]


def compare_commands(base: pathlib.Path, repeats: int, train_args=()) -> None:
    """Times train, translate, export and verify of both checkouts, alternating."""
    import json
    import subprocess
    import time

    checkouts = {"this": HERE.parent, "base": base.resolve()}
    dates = [f"{d} {m} {y}" for d, m, y in zip(range(1, 29), ["Jan", "Feb", "Mar", "Apr", "May",
                                                             "Jun", "Jul"] * 4,
                                              range(1990, 2018))] * 8
    seconds = {(v, c): [] for v in checkouts for c in ("train", "translate", "export", "verify")}
    matches = {v: [] for v in checkouts}
    with tempfile.TemporaryDirectory() as scratch:
        inputs = pathlib.Path(scratch, "dates.txt")
        inputs.write_text("\n".join(dates[:200]) + "\n", encoding="utf-8")
        for r in range(repeats):
            for version in (("this", "base") if r % 2 == 0 else ("base", "this")):
                checkout = checkouts[version]
                env = dict(os.environ, PYTHONPATH=str(checkout), KERAS_BACKEND="tensorflow")
                out = pathlib.Path(scratch, f"{version}{r}")
                run_dir, export_dir = out / "run", out / "export"
                steps = {
                    "train": ["train", "--out", str(out), "--name", "run", *train_args],
                    "translate": ["translate", str(run_dir), "--input", str(inputs)],
                    "export": ["export", str(run_dir), str(export_dir)],
                    "verify": ["verify", str(export_dir)],
                }
                for step, argv in steps.items():
                    start = time.perf_counter()
                    done = subprocess.run(_command(checkout) + argv, env=env, cwd=scratch,
                                          capture_output=True, text=True)
                    seconds[(version, step)].append(time.perf_counter() - start)
                    if done.returncode != 0:
                        raise SystemExit(f"{version} {step} failed:\n{done.stderr[-3000:]}")
                metrics = json.loads((run_dir / "metrics.json").read_text())
                matches[version].append(metrics["test_exact_match"])
                print(f"round {r + 1} {version}: " + ", ".join(
                    f"{step} {seconds[(version, step)][-1]:.1f} s" for step in steps)
                    + f"; exact match {matches[version][-1]:.4f}", flush=True)
    print("\n| command | this median s | base median s | this / base |")
    print("|---|---|---|---|")
    for step in ("train", "translate", "export", "verify"):
        this_t = statistics.median(seconds[("this", step)])
        base_t = statistics.median(seconds[("base", step)])
        print(f"| {step} | {this_t:.1f} | {base_t:.1f} | **{this_t / base_t:.3f}** |")
    print(f"\nexact match: this {matches['this']}, base {matches['base']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--backend", choices=("tensorflow", "jax", "torch"), default="tensorflow")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--only", nargs="*", default=RECURRENT)
    parser.add_argument("--batches", nargs="*", type=int, default=[64, 1])
    parser.add_argument("--jit", choices=("both", "on", "off"), default="both",
                        help="TensorFlow only: with and/or without jit_compile")
    parser.add_argument("--commands", action="store_true",
                        help="compare the command line (train, translate, export, verify)")
    parser.add_argument("--train-args", default="",
                        help="with --commands: options appended to train (quoted)")
    args = parser.parse_args()
    if args.commands:
        compare_commands(pathlib.Path(args.base), args.repeats if args.repeats != 21 else 3,
                         args.train_args.split())
        return
    os.environ["KERAS_BACKEND"] = args.backend
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    from recurrent import BACKENDS, _time_once

    backend = BACKENDS[args.backend]("cpu")
    from keras_seq import layers as this_layers

    base_layers = import_base(args.base)
    jits = {"both": (False, True), "on": (True,), "off": (False,)}[args.jit]
    jits = [j for j in backend.jit_options if j in jits] or list(backend.jit_options)

    print(f"{backend.version()}, {backend.describe()}; {args.repeats} interleaved "
          f"repetitions; load average before: {os.getloadavg()[0]:.1f}\n")
    print("| layer | batch | jit | mode | this median ms | base median ms "
          "| this / base (medians) | this / base (minima) |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.only:
        for batch in args.batches:
            for jit in jits:
                inputs = _inputs(name, batch, np.random.default_rng(0))
                this, base = _make(this_layers, name), _make(base_layers, name)
                for layer in (this, base):
                    layer(*inputs, training=False)
                base.set_weights(this.get_weights())
                fns = {}
                for version, layer in (("this", this), ("base", base)):
                    wrapped = layer if name in RECURRENT else _TwoInputs(layer, inputs,
                                                                         backend.tensor)
                    fns[version] = backend.layer_steps(wrapped, backend.tensor(inputs[0]), jit)
                modes = ("forward", "train") if batch > 1 else ("forward",)
                for version in fns:
                    for mode in modes:
                        _time_once(backend, fns[version][mode], 2)  # trace and warm up
                times = {(v, m): [] for v in fns for m in modes}
                for r in range(args.repeats):
                    order = ("this", "base") if r % 2 == 0 else ("base", "this")
                    for mode in modes:
                        for version in order:
                            times[(version, mode)].append(
                                _time_once(backend, fns[version][mode], 1))
                for mode in modes:
                    this_t, base_t = times[("this", mode)], times[("base", mode)]
                    med_this, med_base = statistics.median(this_t), statistics.median(base_t)
                    print(f"| {name} | {batch} | {jit} | {mode} | {1e3 * med_this:.2f} "
                          f"| {1e3 * med_base:.2f} | **{med_this / med_base:.3f}** "
                          f"| {min(this_t) / min(base_t):.3f} |", flush=True)
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
