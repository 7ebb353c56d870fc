"""Which form of a step's ``h @ U + b`` is faster on this machine (TensorFlow, CPU).

TensorFlow runs a recurrent step's matmul either as MatMul and BiasAdd,
which oneDNN fuses with the step's next Add into one kernel, or as a plain
MatMul and Add. Which is faster depends on the CPU, by a factor of 2-3 at
batch 1 in either direction (benchmarks/RESULTS.md, "The step's matmul"),
so by default each process times both once and keeps the faster
(``KERAS_SEQ_STEP_MATMUL=auto``). This script times the layers whose step
has that matmul at inference in both forms, in one process with
interleaved repetitions (the input an argument with a static shape, as
``predict`` traces it), and prints the ratio and the form ``auto`` picks.

    python benchmarks/step_matmul.py [--batches 1 64] [--repeats 21]
        [--layers PeepholeLSTM CoupledGateLSTM GRU]
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
from keras_seq.layers.recurrent import backend_tensorflow  # noqa: E402


def _traced(layer, form, shape):
    """A tf.function of the layer traced with the step's matmul in ``form``."""
    function = tf.function(lambda x: layer(x, training=False))
    backend_tensorflow.STEP_MATMUL = form  # read while tracing, restored below
    try:
        return function.get_concrete_function(tf.TensorSpec(shape, tf.float32))
    finally:
        backend_tensorflow.STEP_MATMUL = backend_tensorflow.step_matmul_setting(os.environ)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", nargs="*", type=int, default=[1, 64])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--layers", nargs="*", default=["PeepholeLSTM", "CoupledGateLSTM", "GRU"])
    args = parser.parse_args()
    tf.config.set_visible_devices([], "GPU")
    print(f"auto picks: {backend_tensorflow.calibrated_step_matmul()}")
    print("| layer | batch | plain median ms | fused median ms | fused / plain |")
    print("|---|---|---|---|---|")
    for name in args.layers:
        layer = getattr(layers, name)(256, return_sequences=True)
        layer.build((None, None, 128))
        for batch in args.batches:
            x = tf.constant(np.random.default_rng(0).normal(size=(batch, 100, 128)), tf.float32)
            forms = {form: _traced(layer, form, x.shape) for form in ("plain", "fused")}
            times = {form: [] for form in forms}
            for fn in forms.values():
                fn(x)  # warm up
            for r in range(args.repeats):
                for form in (("plain", "fused") if r % 2 == 0 else ("fused", "plain")):
                    start = time.perf_counter()
                    forms[form](x).numpy()
                    times[form].append(time.perf_counter() - start)
            plain, fused = (statistics.median(times[f]) for f in ("plain", "fused"))
            print(f"| {name} | {batch} | {1e3 * plain:.2f} | {1e3 * fused:.2f} | "
                  f"**{fused / plain:.2f}** |", flush=True)


if __name__ == "__main__":
    main()
