"""NTM layer: training-step and inference time, and steps per loop iteration.

A copy-task sized model (LSTM controller of 100 units, 128 x 20 memory, one
read and one write head, shift range 1, 9 input and 8 output features) is
trained with RMSprop on random bits. For each number of steps per loop
iteration (`NTMCell.steps_per_iteration`), the script reports the first
training call (tracing, plus XLA compilation with --jit) and the median of
interleaved repetitions of a training step and of a forward pass, all in one
process.

    python benchmarks/ntm.py --length 22 --jit
"""

from __future__ import annotations

import argparse
import time

import keras
import numpy as np

from keras_seq.layers import NTM


def build(steps_per_iteration: int, jit: bool) -> keras.Model:
    inputs = keras.Input((None, 9))
    layer = NTM(100, memory_size=128, memory_width=20, output_size=8, return_sequences=True)
    layer.cell.steps_per_iteration = steps_per_iteration
    model = keras.Model(inputs, layer(inputs))
    model.compile(keras.optimizers.RMSprop(1e-4),
                  keras.losses.BinaryCrossentropy(from_logits=True), jit_compile=jit)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=22, help="time steps per sequence")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--jit", action="store_true", help="compile with XLA")
    parser.add_argument("--steps-per-iteration", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()

    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).integers(0, 2, (args.batch, args.length, 9)).astype("float32")
    y = x[:, :, :8]
    models = {}
    for k in args.steps_per_iteration:
        model = build(k, args.jit)
        start = time.perf_counter()
        model.train_on_batch(x, y)
        first_train = time.perf_counter() - start
        start = time.perf_counter()
        model.predict_on_batch(x)
        first_predict = time.perf_counter() - start
        print(f"k={k}: first training call {first_train:.1f} s, "
              f"first forward call {first_predict:.1f} s")
        models[k] = model
    train = {k: [] for k in models}
    predict = {k: [] for k in models}
    for _ in range(args.repeats):
        for k, model in models.items():
            start = time.perf_counter()
            model.train_on_batch(x, y)
            train[k].append(time.perf_counter() - start)
            start = time.perf_counter()
            model.predict_on_batch(x)
            predict[k].append(time.perf_counter() - start)
    for k in models:
        print(f"k={k} jit={args.jit} batch={args.batch} T={args.length}: training step "
              f"{np.median(train[k]) * 1e3:.1f} ms, forward {np.median(predict[k]) * 1e3:.1f} ms "
              "(medians)")


if __name__ == "__main__":
    main()
