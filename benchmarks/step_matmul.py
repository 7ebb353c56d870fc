"""Which form of a step's ``h @ U + b`` is faster on this machine (TensorFlow, CPU).

TensorFlow runs a recurrent step's matmul either as a plain MatMul and Add
(the default) or as MatMul and BiasAdd, which oneDNN fuses with the step's
next Add into one kernel. Which is faster depends on the CPU, by a factor of
3-6 at batch 1 in either direction (benchmarks/RESULTS.md, "The step's
matmul"). This script times a `PeepholeLSTM` at inference in both forms, in
one process with interleaved repetitions, and prints the ratio; set
``KERAS_SEQ_STEP_MATMUL=fused`` where the fused form wins.

    python benchmarks/step_matmul.py [--batches 1 64] [--repeats 21]
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

from keras_seq.layers import PeepholeLSTM  # noqa: E402
from keras_seq.layers.recurrent import backend_tensorflow  # noqa: E402


def _traced(layer, form):
    """A tf.function of the layer traced with the step's matmul in ``form``."""
    function = tf.function(lambda x: layer(x, training=False))
    backend_tensorflow.STEP_MATMUL = form  # read while tracing, restored below
    try:
        return function.get_concrete_function(tf.TensorSpec((None, None, 128), tf.float32))
    finally:
        backend_tensorflow.STEP_MATMUL = os.environ.get(backend_tensorflow.STEP_MATMUL_ENV,
                                                        "plain")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", nargs="*", type=int, default=[1, 64])
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    tf.config.set_visible_devices([], "GPU")
    layer = PeepholeLSTM(256, return_sequences=True)
    layer.build((None, None, 128))
    forms = {form: _traced(layer, form) for form in ("plain", "fused")}
    print("| batch | plain median ms | fused median ms | fused / plain |")
    print("|---|---|---|---|")
    for batch in args.batches:
        x = tf.constant(np.random.default_rng(0).normal(size=(batch, 100, 128)), tf.float32)
        times = {form: [] for form in forms}
        for fn in forms.values():
            fn(x)  # warm up
        for r in range(args.repeats):
            for form in (("plain", "fused") if r % 2 == 0 else ("fused", "plain")):
                start = time.perf_counter()
                forms[form](x).numpy()
                times[form].append(time.perf_counter() - start)
        plain, fused = (statistics.median(times[f]) for f in ("plain", "fused"))
        print(f"| {batch} | {1e3 * plain:.2f} | {1e3 * fused:.2f} | **{fused / plain:.2f}** |")


if __name__ == "__main__":
    main()
