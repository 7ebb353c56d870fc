"""What each cell's hand-written derivative buys: training with it against autodiff (not a test).

TensorFlow trains a cell with a hand-written derivative (``manual_gradient()``,
`keras_seq.layers.ManualGradient`) by backpropagation through time under XLA;
without it, by TensorFlow's autodiff of the step loop. This script times one
training step (forward and the gradients of every weight, no optimizer
update; loss = mean of the squared outputs, ``return_sequences=True``) of
each such layer both ways, without and with ``jit_compile``, all candidates
interleaved in one process, and prints the medians and the ratio
autodiff / hand-written (above 1: the derivative pays).

    python benchmarks/manual_gradient.py [--batch 64] [--steps 100] [--repeats 11]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["KERAS_BACKEND"] = "tensorflow"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_seq import layers  # noqa: E402
from keras_seq.layers.recurrent import backend  # noqa: E402

LAYERS = ["PeepholeLSTM", "CoupledGateLSTM", "GRU", "LayerNormLSTM"]


def train_step(name, x, units, jit, hand_written):
    """A traced training step of a new layer, with or without its derivative."""
    layer = getattr(layers, name)(units, return_sequences=True)
    layer(x[:, :2])

    @tf.function(jit_compile=jit)
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(layer(x, training=True)))
        return tape.gradient(loss, layer.trainable_weights)

    saved = backend.MANUAL_GRADIENT_LOOP
    backend.MANUAL_GRADIENT_LOOP = hand_written  # read while tracing, restored below
    try:
        concrete = step.get_concrete_function(tf.TensorSpec(x.shape, x.dtype))
    finally:
        backend.MANUAL_GRADIENT_LOOP = saved
    return lambda: [g.numpy() for g in concrete(x)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args()
    tf.config.set_visible_devices([], "GPU")
    x = tf.constant(np.random.default_rng(0).normal(
        size=(args.batch, args.steps, args.features)).astype("float32"))
    print(f"B{args.batch} T{args.steps} in{args.features} u{args.units}, "
          f"{args.repeats} interleaved repetitions")
    print("| layer | jit | hand-written median ms | autodiff median ms | autodiff / hand-written |")
    print("|---|---|---|---|---|")
    for jit in (False, True):
        runs = {(name, hand): train_step(name, x, args.units, jit, hand)
                for name in LAYERS for hand in (True, False)}
        for run in runs.values():
            run()  # compile outside the timing
        times = {key: [] for key in runs}
        keys = list(runs)
        for r in range(args.repeats):
            for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                start = time.perf_counter()
                runs[key]()
                times[key].append(time.perf_counter() - start)
        for name in LAYERS:
            hand, auto = (statistics.median(times[name, h]) for h in (True, False))
            print(f"| {name} | {jit} | {1e3 * hand:.1f} | {1e3 * auto:.1f} | "
                  f"**{auto / hand:.2f}** |", flush=True)
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
