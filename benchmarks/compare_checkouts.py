"""Speed of this checkout's layers against another checkout's, in one process.

A refactoring must not make a layer slower. Comparing two runs of
`recurrent.py` / `attention.py` (each a ratio against Keras) mixes in the
machine's drift between runs, which on a shared machine is larger than the
effect to detect. Here both versions are imported into one process (the other
checkout's package is copied to a temporary directory and renamed
``keras_seq_base``), given the same weights and timed in interleaved
repetitions; the ratio of medians this / base is printed per layer and mode.

Usage: ``python benchmarks/compare_checkouts.py --base ../other-checkout``
(``--base`` is a directory that holds a ``keras_seq/`` package).
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
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from keras_seq import layers as this_layers  # noqa: E402


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


def _recurrent(module, name, units):
    return getattr(module, name)(units, return_sequences=True)


CANDIDATES = {
    # name: (factory(module) -> layer, input builder(batch) -> list of arrays)
    "PeepholeLSTM": (lambda m: _recurrent(m, "PeepholeLSTM", 256), "sequence"),
    "CoupledGateLSTM": (lambda m: _recurrent(m, "CoupledGateLSTM", 256), "sequence"),
    "GRU": (lambda m: _recurrent(m, "GRU", 256), "sequence"),
    "MultiHeadAttention": (lambda m: m.MultiHeadAttention(num_heads=4, key_dim=32), "qv"),
    "TransformerEncoder": (lambda m: m.TransformerEncoder(512, 4), "block"),
    "TransformerDecoder": (lambda m: m.TransformerDecoder(512, 4), "block2"),
    "BahdanauAttention": (lambda m: m.BahdanauAttention(128), "bahdanau"),
}


def _inputs(kind, batch, rng):
    def normal(*shape):
        return tf.constant(rng.normal(size=shape).astype("float32"))

    if kind == "sequence":
        return [normal(batch, 100, 128)]
    if kind == "qv":
        return [normal(batch, 64, 128), normal(batch, 64, 128)]
    if kind == "block":
        return [normal(batch, 64, 128)]
    if kind == "block2":
        return [normal(batch, 64, 128), normal(batch, 64, 128)]
    return [normal(batch, 128), normal(batch, 40, 128)]  # bahdanau: query, value


def _call(layer, kind, inputs, training):
    if kind == "qv":
        return layer(inputs[0], inputs[1], training=training)
    if kind == "block2":
        return layer(inputs[0], inputs[1], training=training)
    if kind == "bahdanau":
        return layer(inputs[0], inputs[1], training=training)[0]
    return layer(inputs[0], training=training)


def _functions(layer, kind, inputs):
    @tf.function
    def forward():
        return _call(layer, kind, inputs, False)

    @tf.function
    def train():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(_call(layer, kind, inputs, True), tf.float32) ** 2)
        return tape.gradient(loss, layer.trainable_variables)

    return {"forward": forward, "train": train}


def _once(fn):
    start = time.perf_counter()
    tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, fn())
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--only", nargs="*", default=list(CANDIDATES))
    parser.add_argument("--batches", nargs="*", type=int, default=[64, 1])
    args = parser.parse_args()
    base_layers = import_base(args.base)

    print(f"TF {tf.__version__}; {args.repeats} interleaved repetitions; "
          f"load average before: {os.getloadavg()[0]:.1f}\n")
    print("| layer | batch | mode | this median ms | base median ms | this / base (medians) "
          "| this / base (minima) |")
    print("|---|---|---|---|---|---|---|")
    for name in args.only:
        factory, kind = CANDIDATES[name]
        for batch in args.batches:
            inputs = _inputs(kind, batch, np.random.default_rng(0))
            this, base = factory(this_layers), factory(base_layers)
            _call(this, kind, inputs, False)
            _call(base, kind, inputs, False)
            base.set_weights(this.get_weights())
            fns = {"this": _functions(this, kind, inputs), "base": _functions(base, kind, inputs)}
            modes = ("forward", "train") if batch > 1 else ("forward",)
            times = {(v, m): [] for v in fns for m in modes}
            for fn in (f for v in fns.values() for f in v.values()):
                fn()  # trace and warm up
            for _ in range(args.repeats):
                for mode in modes:
                    for version in ("this", "base"):
                        times[(version, mode)].append(_once(fns[version][mode]))
            for mode in modes:
                this_t, base_t = times[("this", mode)], times[("base", mode)]
                med_this, med_base = statistics.median(this_t), statistics.median(base_t)
                print(f"| {name} | {batch} | {mode} | {1e3 * med_this:.2f} | {1e3 * med_base:.2f} "
                      f"| **{med_this / med_base:.3f}** | {min(this_t) / min(base_t):.3f} |",
                      flush=True)
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
