"""Speed of the attention family against the Keras built-ins (not a test).

1. Forward+backward time of one `TransformerEncoder` block (batch 32, length
   128, width 256, 8 heads, d_ff 1024) against the same post-norm block
   composed of `keras.layers.MultiHeadAttention`, `LayerNormalization` and
   `Dense`, with and without `jit_compile=True`.
2. Tokens/second of greedy decoding with a decoder-only model (4
   `TransformerDecoder` blocks, width 256, 8 heads, batch 8): the key/value
   cache inside one `tf.while_loop` against recomputing the whole prefix at
   every step, for 64, 128 and 256 generated tokens; and whether the cached
   per-token time stays flat (second half of a run against the first half).

Candidates run interleaved in one process (each repetition runs every
candidate once, in a rotating order), so load from other processes hits them
alike; the tables report medians and the spread (max/min over repetitions).

    python benchmarks/attention.py                 # both parts
    python benchmarks/attention.py --repeats 3     # quicker, noisier
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

# Every decoder variant is its own tf.function; the retracing notice is expected.
tf.get_logger().setLevel("ERROR")


def _interleaved(functions: dict, repeats: int) -> dict:
    """(median, minimum, max/min spread) of seconds per call, rotating the order."""
    for f in functions.values():  # trace/compile and warm up
        f()
    names = list(functions)
    times = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            result = functions[name]()
            tf.nest.map_structure(lambda t: t.numpy(), result)
            times[name].append(time.perf_counter() - start)
    return {name: (statistics.median(t), min(t), max(t) / min(t)) for name, t in times.items()}


# ------------------------------------------------------------------ block


class _KerasComposedBlock(keras.layers.Layer):
    """The post-norm encoder block written with Keras built-ins only."""

    def __init__(self, width, heads, d_ff, **kwargs):
        super().__init__(**kwargs)
        self.attention = keras.layers.MultiHeadAttention(heads, width // heads)
        self.norm_1 = keras.layers.LayerNormalization(epsilon=1e-5)
        self.dense_1 = keras.layers.Dense(d_ff, activation="relu")
        self.dense_2 = keras.layers.Dense(width)
        self.norm_2 = keras.layers.LayerNormalization(epsilon=1e-5)

    def call(self, x):
        x = self.norm_1(x + self.attention(x, x))
        return self.norm_2(x + self.dense_2(self.dense_1(x)))


def _train_step(block, x, jit):
    block(x)

    @tf.function(jit_compile=jit)
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(block(x, training=True)))
        return tape.gradient(loss, block.trainable_weights)

    return step


def benchmark_block(repeats: int, batch=32, length=128, width=256, heads=8, d_ff=1024):
    x = tf.constant(np.random.default_rng(0).normal(size=(batch, length, width)), tf.float32)
    functions = {}
    for jit in (False, True):
        suffix = " (XLA)" if jit else ""
        functions["ours" + suffix] = _train_step(layers.TransformerEncoder(d_ff, heads), x, jit)
        functions["keras" + suffix] = _train_step(
            _KerasComposedBlock(width, heads, d_ff, name="keras_block"), x, jit
        )
    result = _interleaved(functions, repeats)
    print(f"\nEncoder block forward+backward, B{batch} T{length} d{width} h{heads} ff{d_ff}")
    print(
        "| variant | ours ms (median) | Keras-composed ms (median) | ours / Keras (median) "
        "| ours / Keras (min) | spread max/min (ours, Keras) |"
    )
    print("|---|---|---|---|---|---|")
    for suffix, label in (("", "eager graph"), (" (XLA)", "jit_compile=True")):
        ours, keras_ = result["ours" + suffix], result["keras" + suffix]
        print(
            f"| {label} | {ours[0] * 1e3:.1f} | {keras_[0] * 1e3:.1f} | "
            f"{ours[0] / keras_[0]:.2f}x | {ours[1] / keras_[1]:.2f}x | "
            f"{ours[2]:.2f}, {keras_[2]:.2f} |"
        )


# ------------------------------------------------------------------ decoding


class _LanguageModel:
    """Token embedding + sinusoidal positions + decoder-only blocks + vocabulary head."""

    def __init__(self, vocabulary=1000, width=256, heads=8, d_ff=1024, depth=4):
        self.width, self.heads, self.depth = width, heads, depth
        self.embedding = keras.layers.Embedding(vocabulary, width)
        self.positions = layers.SinusoidalPositionalEncoding()
        self.blocks = [layers.TransformerDecoder(d_ff, heads) for _ in range(depth)]
        self.head = keras.layers.Dense(vocabulary)

    def full(self, tokens):
        """Logits of every position, `(B, T, vocabulary)`, causal."""
        x = self.positions(self.embedding(tokens))
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def step(self, token, caches, index):
        """Logits of one new token at `index`, and the updated caches."""
        x = self.positions(self.embedding(token[:, None]), start_index=index)
        new_caches = []
        for block, cache in zip(self.blocks, caches):
            x, cache = block(x, self_attention_cache=cache, self_attention_cache_update_index=index)
            new_caches.append(cache)
        return self.head(x)[:, 0], new_caches


def _cached_decoder(model, batch, steps, max_length, jit):
    head_dim = model.width // model.heads

    @tf.function(jit_compile=jit)
    def decode():
        caches = [
            tf.zeros((batch, 2, max_length, model.heads, head_dim)) for _ in range(model.depth)
        ]
        tokens = tf.zeros((batch, max_length), tf.int32)

        def body(i, token, tokens, caches):
            logits, caches = model.step(token, caches, i)
            token = tf.argmax(logits, axis=-1, output_type=tf.int32)
            tokens = tf.tensor_scatter_nd_update(
                tokens, tf.stack([tf.range(batch), tf.fill([batch], i)], axis=1), token
            )
            return i + 1, token, tokens, caches

        _, _, tokens, _ = tf.while_loop(
            lambda i, *_: i < steps,
            body,
            (tf.constant(0), tf.ones((batch,), tf.int32), tokens, caches),
        )
        return tokens

    return decode


def _recompute_decoder(model, batch, steps):
    @tf.function
    def decode():
        tokens = tf.ones((batch, 1), tf.int32)

        def body(i, tokens):
            logits = model.full(tokens)[:, -1]  # the whole prefix, again
            token = tf.argmax(logits, axis=-1, output_type=tf.int32)
            return i + 1, tf.concat([tokens, token[:, None]], axis=1)

        _, tokens = tf.while_loop(
            lambda i, _: i < steps,
            body,
            (tf.constant(0), tokens),
            shape_invariants=(tf.TensorShape([]), tf.TensorShape([batch, None])),
        )
        return tokens[:, 1:]

    return decode


def benchmark_decoding(repeats: int, batch=8, lengths=(64, 128, 256)):
    model = _LanguageModel()
    model.full(tf.ones((batch, 2), tf.int32))  # build
    functions = {}
    for n in lengths:
        functions[f"cached {n}"] = _cached_decoder(model, batch, n, n, jit=False)
        functions[f"cached XLA {n}"] = _cached_decoder(model, batch, n, n, jit=True)
        functions[f"recompute {n}"] = _recompute_decoder(model, batch, n)
        # Half the steps with the same cache size: is the per-token time flat?
        functions[f"cached half {n}"] = _cached_decoder(model, batch, n // 2, n, jit=False)
    # The cached and the recomputing decoder must generate the same tokens.
    for n in lengths[:1]:
        np.testing.assert_array_equal(
            functions[f"cached {n}"]().numpy(), functions[f"recompute {n}"]().numpy()
        )
    result = _interleaved(functions, repeats)
    print(f"\nGreedy decoding, decoder-only 4x d256 h8 ff1024, batch {batch} (tokens/s)")
    print(
        "| tokens | cached | cached XLA | recompute prefix | cached / recompute | "
        "cached ms/token 1st half, 2nd half (min) | spread (max/min) |"
    )
    print("|---|---|---|---|---|---|---|")
    for n in lengths:
        cached, xla, recompute = (
            result[f"{k} {n}"][0] for k in ("cached", "cached XLA", "recompute")
        )
        # Minimum times: a difference of two noisy medians would mostly be noise.
        full_min, half_min = result[f"cached {n}"][1], result[f"cached half {n}"][1]
        first, second = half_min / (n / 2), (full_min - half_min) / (n / 2)
        spread = max(result[f"{k} {n}"][2] for k in ("cached", "cached XLA", "recompute"))
        print(
            f"| {n} | {batch * n / cached:,.0f} | {batch * n / xla:,.0f} | "
            f"{batch * n / recompute:,.0f} | {recompute / cached:.1f}x | "
            f"{first * 1e3:.2f}, {second * 1e3:.2f} | {spread:.2f} |"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--part", choices=["all", "block", "decoding"], default="all")
    args = parser.parse_args()
    print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}, {os.cpu_count()} CPUs")
    if args.part in ("all", "block"):
        benchmark_block(args.repeats)
    if args.part in ("all", "decoding"):
        benchmark_decoding(args.repeats)


if __name__ == "__main__":
    main()
