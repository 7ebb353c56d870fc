"""LayerNormLSTM's two inference forms of LN_x without XLA, by input width (not a test).

Outside XLA, `LayerNormLSTMCell` folds LN_x into the input projection when the
input is at most half as wide as the units (``_normalises_projection``);
otherwise each step normalises its own row of ``x W``. This times both forms
of the same layer (the choice forced either way) against
``keras.layers.LSTM`` in one process, interleaved, for several input widths,
on TensorFlow without ``jit_compile``: the measurement behind that threshold.

    python benchmarks/layernorm_forms.py                   # B64 T100 u256, in 64..512
    python benchmarks/layernorm_forms.py --batch 1 --widths 128
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--widths", default="64,128,256,512",
                        help="comma-separated input widths")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()

    import keras
    import numpy as np
    import tensorflow as tf

    from keras_seq.layers import LayerNormLSTM
    from keras_seq.layers.recurrent.layernorm_lstm import LayerNormLSTMCell

    tf.config.set_visible_devices([], "GPU")
    chosen = LayerNormLSTMCell._normalises_projection
    print(f"Keras {keras.__version__}, TensorFlow {tf.__version__}, CPU, {os.cpu_count()} threads; "
          f"B={args.batch} T={args.steps} u={args.units}, return_sequences=True, XLA off, "
          f"{args.repeats} interleaved repetitions\n")
    print("| in | in / u | folded (ms) | in the step (ms) | Keras LSTM (ms) "
          "| folded / Keras | in the step / Keras | chosen |")
    print("|---|---|---|---|---|---|---|---|")
    for width in (int(w) for w in args.widths.split(",")):
        rng = np.random.default_rng(0)
        x = tf.constant(rng.normal(size=(args.batch, args.steps, width)).astype("float32"))
        layer = LayerNormLSTM(args.units, return_sequences=True)
        layer(x[:, :2])
        reference = keras.layers.LSTM(args.units, return_sequences=True)
        reference(x[:, :2])
        picked = "folded" if chosen(layer.cell) else "in the step"

        def form(folded, layer=layer, x=x):
            @tf.function
            def forward():
                # The choice is read while tracing; forced here, restored after.
                LayerNormLSTMCell._normalises_projection = lambda self: folded
                try:
                    return layer(x, training=False)
                finally:
                    LayerNormLSTMCell._normalises_projection = chosen
            return forward

        candidates = {"folded": form(True), "in the step": form(False),
                      "keras": tf.function(lambda r=reference, x=x: r(x, training=False))}
        difference = np.abs(candidates["folded"]().numpy()
                            - candidates["in the step"]().numpy()).max()
        times = {name: [] for name in candidates}
        names = list(candidates)
        for _ in range(2):
            for run in candidates.values():
                run().numpy()
        for r in range(args.repeats):
            for name in names[r % 3:] + names[:r % 3]:
                start = time.perf_counter()
                candidates[name]().numpy()
                times[name].append(time.perf_counter() - start)
        median = {name: statistics.median(t) * 1e3 for name, t in times.items()}
        print(f"| {width} | {width / args.units:.2f} | {median['folded']:.1f} "
              f"| {median['in the step']:.1f} | {median['keras']:.1f} "
              f"| **{median['folded'] / median['keras']:.2f}** "
              f"| **{median['in the step'] / median['keras']:.2f}** | {picked} |"
              f"  <!-- max |folded - in the step| = {difference:.1e} -->")


if __name__ == "__main__":
    main()
