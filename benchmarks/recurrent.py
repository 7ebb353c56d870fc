"""Speed of the recurrent family against the Keras built-ins (not a test).

Times one batch of forward (inference) and forward+backward (gradients of all
weights) for PeepholeLSTM, CoupledGateLSTM and GRU against keras.layers.LSTM /
keras.layers.GRU with the same shapes, with and without ``jit_compile=True``.
All candidates run interleaved in one process (repetition r times every
candidate once, in a rotating order) so that load from other processes hits
them alike. The table reports, per candidate, the median and the minimum time
per batch and the ratios ours / Keras of both: on a shared machine the median
ratio carries the other processes' load, the minimum ratio is the closest to
an idle machine; the relative interquartile range says how noisy it was.

    python benchmarks/recurrent.py                 # B64 T100 in128 u256 + B1 latency
    python benchmarks/recurrent.py --repeats 5     # quicker, noisier
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_seq import layers  # noqa: E402

PAIRS = [  # (ours, reference)
    ("PeepholeLSTM", "keras LSTM"),
    ("CoupledGateLSTM", "keras LSTM"),
    ("GRU", "keras GRU"),
]
FACTORIES = {
    "PeepholeLSTM": layers.PeepholeLSTM,
    "CoupledGateLSTM": layers.CoupledGateLSTM,
    "GRU": layers.GRU,
    "keras LSTM": keras.layers.LSTM,
    "keras GRU": keras.layers.GRU,
}


def _functions(name, batch, steps, features, units, jit, seed=0):
    layer = FACTORIES[name](units, return_sequences=True)
    x = tf.constant(np.random.default_rng(seed).normal(size=(batch, steps, features)), tf.float32)
    layer.build(x.shape)

    @tf.function(jit_compile=jit)
    def forward():
        return layer(x, training=False)

    @tf.function(jit_compile=jit)
    def forward_backward():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(layer(x, training=True)))
        return tape.gradient(loss, layer.trainable_weights)

    return {"forward": forward, "train": forward_backward}


def _time_once(fn, iterations):
    start = time.perf_counter()
    for _ in range(iterations):
        result = fn()
    tf.nest.map_structure(lambda t: t.numpy(), result)  # wait for the last call
    return (time.perf_counter() - start) / iterations


def measure(batch, steps, features, units, jit, modes, repeats, iterations):
    """Median seconds per batch for every (candidate, mode), interleaved."""
    fns = {name: _functions(name, batch, steps, features, units, jit) for name in FACTORIES}
    samples = {(name, mode): [] for name in FACTORIES for mode in modes}
    for name in FACTORIES:  # trace, compile and warm up outside the timing
        for mode in modes:
            _time_once(fns[name][mode], 2)
    keys = list(samples)
    for r in range(repeats):
        shift = r % len(keys)
        for name, mode in keys[shift:] + keys[:shift]:
            samples[(name, mode)].append(_time_once(fns[name][mode], iterations))
    return {key: (statistics.median(v), min(v), _spread(v)) for key, v in samples.items()}


def _spread(values):
    """Relative interquartile range: how noisy the machine was."""
    q = np.percentile(values, [25, 75])
    return float((q[1] - q[0]) / np.median(values))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()

    print(f"TF {tf.__version__}, Keras {keras.__version__}, devices: "
          f"{[d.device_type for d in tf.config.list_physical_devices()]}, "
          f"CPU threads: {os.cpu_count()}")
    print(f"T={args.steps} in={args.features} u={args.units}, return_sequences=True, "
          f"{args.repeats} interleaved repetitions x {args.iterations} calls; "
          f"load average before: {os.getloadavg()[0]:.1f}\n")
    print("| batch | jit | mode | ours | median ms (IQR) | min ms | Keras | median ms (IQR) | "
          "min ms | ratio of medians | ratio of minima |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    settings = [(64, False, ("forward", "train")), (64, True, ("forward", "train")),
                (1, False, ("forward",)), (1, True, ("forward",))]
    for batch, jit, modes in settings:
        results = measure(batch, args.steps, args.features, args.units, jit, modes,
                          args.repeats, args.iterations)
        for mode in modes:
            for ours, reference in PAIRS:
                med, low, spread = results[(ours, mode)]
                ref_med, ref_low, ref_spread = results[(reference, mode)]
                print(f"| {batch} | {jit} | {mode} | {ours} | {1e3 * med:.1f} ({100 * spread:.0f}%) "
                      f"| {1e3 * low:.1f} | {reference} | {1e3 * ref_med:.1f} "
                      f"({100 * ref_spread:.0f}%) | {1e3 * ref_low:.1f} | **{med / ref_med:.2f}** "
                      f"| **{low / ref_low:.2f}** |", flush=True)
    # Chosen by timing at the first trace, or fixed by KERAS_SEQ_STEP_MATMUL.
    from keras_seq.layers._recurrent_loops import step_matmul_form

    print(f"\nstep matmul form: {step_matmul_form()}; "
          f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
