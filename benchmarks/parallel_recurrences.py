"""Training speed of the parallel recurrences against this package's GRU (not a test).

One training step (forward and the gradients of every weight, no optimizer
update; loss = mean of the squared outputs, ``return_sequences=True``) at
batch 16, 64 inputs, 256 units, for T in ``--lengths``:

- ``GRU``: `keras_seq.layers.GRU`, the reference of every ratio;
- ``MinGRU``, ``MinLSTM``, ``MLSTM``, and ``RGLRU`` after a Dense layer
  (64 → 256: its input width is its units), in their training form (the
  scan, or the mLSTM's chunked parallel form);
- the same layers in their step form (`keras_seq.layers.RNN` of the cell
  with ``parallel = None``: the package's loop, as at inference), and where
  the backend trains a layer in its step loop (JAX's CPU: MinGRU, MinLSTM)
  the layer in its scan form;
- ``MinGRU`` with other scans over the same coefficients: the log-space form
  (Heinsen 2023; cumulative sums and a cumulative log-sum-exp) and
  ``keras.ops.associative_scan`` (where it runs).

TensorFlow runs ``tf.function``s without and with ``jit_compile`` (``fit``
on a CPU compiles without XLA); JAX ``jax.jit`` of ``jax.grad`` of the
layer's ``stateless_call``. All candidates of one backend and length run
interleaved in one process (each repetition times every candidate once, in
a rotating order); the table gives medians, the interquartile range as a
fraction of the median, and the ratio of medians to the GRU's. It also
prints the largest error of each MinGRU scan against float64 (NumPy) at
each length. ``--plot`` draws time against T (one PNG per backend).

    python benchmarks/parallel_recurrences.py --backend tensorflow --plot
    python benchmarks/parallel_recurrences.py --backend jax --lengths 256,1024
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

B, IN, U = 16, 64, 256


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("tensorflow", "jax", "torch"), default="tensorflow")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                        help="JAX and torch only (TensorFlow takes its GPU where it has one)")
    parser.add_argument("--lengths", default="256,1024,4096")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--step-form-max-length", type=int, default=4096,
                        help="time the step forms up to this T (they take T steps)")
    parser.add_argument("--xla-step-form-max-length", type=int, default=1024,
                        help="the same under XLA (TensorFlow's jit_compile=True), whose step "
                        "loops compile slowly and run out of memory at T = 4096 (mLSTM)")
    parser.add_argument("--plot", action="store_true",
                        help="write benchmarks/figures/parallel_recurrences_<backend>.png")
    parser.add_argument("--json", help="also write the rows to this file")
    return parser.parse_args()


def main():
    args = parse_args()
    os.environ["KERAS_BACKEND"] = args.backend
    if args.backend == "jax" and args.device == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
    if args.backend == "torch":
        os.environ["KERAS_TORCH_DEVICE"] = "cuda" if args.device == "gpu" else "cpu"
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import keras

    from keras_seq import layers

    runner = {"tensorflow": TensorFlowRunner, "jax": JaxRunner, "torch": TorchRunner}[
        args.backend](args.device)
    print(f"Keras {keras.__version__}, {args.backend}, device: {runner.describe()}")
    rows = []
    for steps in [int(t) for t in args.lengths.split(",")]:
        keras.utils.set_random_seed(0)
        x = np.random.default_rng(0).normal(size=(B, steps, IN)).astype("float32")
        candidates = candidate_layers(layers, steps <= args.step_form_max_length)
        if steps <= 1024:
            print_scan_errors(steps)
        for jit in runner.jit_options:
            steps_fns = {}
            for name, make in candidates.items():
                if jit and "step form" in name and steps > args.xla_step_form_max_length:
                    continue
                try:
                    step = runner.train_step(make(), x, jit)
                    step()  # trace and compile outside the timing
                    steps_fns[name] = step
                except Exception as error:  # noqa: BLE001 - report it, time the others
                    print(f"T={steps} jit={jit} {name}: {type(error).__name__}: "
                          f"{str(error).splitlines()[0][:120]}", flush=True)
            times = {name: [] for name in steps_fns}
            names = list(steps_fns)
            for r in range(args.repeats):
                for name in names[r % len(names):] + names[: r % len(names)]:
                    start = time.perf_counter()
                    steps_fns[name]()
                    times[name].append(time.perf_counter() - start)
            reference = statistics.median(times["GRU"])
            for name, values in times.items():
                median = statistics.median(values)
                q1, _, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (0, 0, 0)
                rows.append({"backend": args.backend, "jit": jit, "T": steps, "layer": name,
                             "median_ms": 1000 * median, "iqr": (q3 - q1) / median,
                             "ratio_to_gru": median / reference})
            print_rows([r for r in rows if r["T"] == steps and r["jit"] == jit])
    print(f"\nload average after the run: {os.getloadavg()}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    if args.plot:
        plot(rows, args.backend)


def candidate_layers(layers, with_step_forms: bool) -> dict:
    """name -> a function that builds the layer (return_sequences=True)."""
    import keras

    def step_form(cell_class, **kwargs):
        cell = type(f"StepOnly{cell_class.__name__}", (cell_class,), {"parallel": None})
        return lambda: layers.RNN(cell(U, **kwargs), return_sequences=True)

    def rglru(make_rnn):
        def make():
            inputs = keras.Input((None, IN))
            return keras.Model(inputs, make_rnn()(keras.layers.Dense(U)(inputs)))
        return make

    candidates = {
        "GRU": lambda: layers.GRU(U, return_sequences=True),
        "MinGRU": lambda: layers.MinGRU(U, return_sequences=True),
        "MinLSTM": lambda: layers.MinLSTM(U, return_sequences=True),
        "RGLRU (after Dense)": rglru(lambda: layers.RGLRU(U, return_sequences=True)),
        "MLSTM (4 heads)": lambda: layers.MLSTM(U, num_heads=4, return_sequences=True),
        "MinGRU log-space scan": lambda: layers.RNN(scan_variant(layers.MinGRUCell,
                                                                 log_space_scan)(U),
                                                    return_sequences=True),
        "MinGRU keras.ops.associative_scan": lambda: layers.RNN(
            scan_variant(layers.MinGRUCell, associative_scan)(U), return_sequences=True),
    }
    if keras.backend.backend() in ("tensorflow", "torch"):
        candidates["MinGRU doubling scan (GPU form)"] = lambda: layers.RNN(
            scan_variant(layers.MinGRUCell, doubling_scan)(U), return_sequences=True)
    from keras_seq.layers.recurrent import fast_paths

    for name, cell in (("MinGRU", layers.MinGRUCell), ("MinLSTM", layers.MinLSTMCell)):
        if fast_paths.training_form(cell(U), False) != fast_paths.PARALLEL:  # JAX's CPU
            candidates[f"{name} scan form"] = parallel_form(layers, cell)
    if with_step_forms:
        candidates.update({
            "MinGRU step form": step_form(layers.MinGRUCell),
            "MinLSTM step form": step_form(layers.MinLSTMCell),
            "RGLRU step form (after Dense)": rglru(step_form(layers.RGLRUCell)),
            "MLSTM step form (4 heads)": step_form(layers.MLSTMCell, num_heads=4),
        })
    return candidates


def parallel_form(layers, cell_class):
    """The layer of ``cell_class`` training in its parallel form whatever the
    backend's rule (`LoopHints.steps_fuse_on_cpu` off)."""
    import dataclasses

    hints = dataclasses.replace(cell_class.loop_hints, steps_fuse_on_cpu=False)
    cell = type(f"Parallel{cell_class.__name__}", (cell_class,), {"loop_hints": hints})
    return lambda: layers.RNN(cell(U), return_sequences=True)


def scan_variant(cell_class, scan):
    """``cell_class`` whose parallel form runs ``scan(a, b, h0)`` instead."""

    def parallel(self, inputs, states, mask=None, training=False):
        a, b = self.coefficients(inputs)
        h = scan(a, b, states[0])
        return h, [h[:, -1]]

    return type(f"{cell_class.__name__}{scan.__name__}", (cell_class,), {"parallel": parallel})


def doubling_scan(a, b, h0):
    """The form TensorFlow and PyTorch train in on a GPU (Hillis and Steele's
    doubling scan, ⌈log2 T⌉ passes), here on the CPU."""
    import keras

    if keras.backend.backend() == "tensorflow":
        from keras_seq.layers.recurrent.backend_tensorflow import _differentiable_linear_scan

        return _differentiable_linear_scan(a, b, h0, True)
    from keras_seq.layers.recurrent import backend_torch

    return backend_torch._doubling_steps(a, b, h0, False)  # autograd through its passes


def associative_scan(a, b, h0):
    from keras import ops

    def compose(first, second):
        return first[0] * second[0], second[0] * first[1] + second[1]

    b = ops.concatenate([a[:, :1] * h0[:, None] + b[:, :1], b[:, 1:]], axis=1)
    return ops.associative_scan(compose, (a, b), axis=1)[1]


def log_space_scan(a, b, h0):
    """h_t = exp(A_t + logcumsumexp_s(log b_s − A_s)), A_t = Σ_{r≤t} log a_r:
    b > 0 and h0 ≥ 0 only (MinGRU's g(·) is positive for that reason)."""
    from keras import ops

    log_a = ops.cumsum(ops.log(a), axis=1)
    log_b = ops.log(b) - log_a
    # h0 enters as one more term before the first step.
    log_b = ops.concatenate([ops.log(ops.maximum(h0, 1e-30))[:, None], log_b], axis=1)
    return ops.exp(log_a + cumulative_logsumexp(log_b)[:, 1:])


def cumulative_logsumexp(x):
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.math.cumulative_logsumexp(x, axis=1)
    if backend == "jax":
        import jax

        return jax.lax.cumlogsumexp(x, axis=1)
    import torch

    return torch.logcumsumexp(x, dim=1)


def print_scan_errors(steps):
    """The largest error of each scan form of MinGRU's recurrence (float32)
    against float64, on the coefficients of random pre-activations."""
    from keras import ops

    from keras_seq.layers.recurrent.linear_recurrence import linear_recurrence

    rng = np.random.default_rng(1)
    z = 1 / (1 + np.exp(-rng.normal(size=(2, steps, 8))))
    h_pre = rng.normal(size=(2, steps, 8))
    a, b = 1 - z, z * np.where(h_pre >= 0, h_pre + 0.5, 1 / (1 + np.exp(-h_pre)))
    h, reference = np.zeros((2, 8)), []
    for t in range(steps):
        h = a[:, t] * h + b[:, t]
        reference.append(h)
    reference = np.stack(reference, axis=1)
    a32, b32, h0 = a.astype("float32"), b.astype("float32"), np.zeros((2, 8), "float32")
    forms = {"sequential (linear_recurrence)": linear_recurrence,
             "log-space": log_space_scan, "associative": associative_scan}
    for name, scan in forms.items():
        try:
            got = ops.convert_to_numpy(scan(a32, b32, h0))
            print(f"T={steps} MinGRU scan error, {name}: max abs "
                  f"{np.abs(got - reference).max():.2e}, max relative "
                  f"{(np.abs(got - reference) / np.abs(reference)).max():.2e}")
        except Exception as error:  # noqa: BLE001
            print(f"T={steps} {name}: {type(error).__name__}")


class TensorFlowRunner:
    jit_options = (False, True)

    def __init__(self, device):
        import tensorflow as tf

        if device == "cpu":
            tf.config.set_visible_devices([], "GPU")
        elif not tf.config.list_physical_devices("GPU"):
            sys.exit("parallel_recurrences.py: --device gpu: no GPU visible to TensorFlow")
        self.device = device

    def describe(self):
        return "GPU" if self.device == "gpu" else f"CPU, {os.cpu_count()} threads"

    def train_step(self, layer, x, jit):
        import tensorflow as tf

        layer(x[:, :2])
        x = tf.constant(x)

        @tf.function(jit_compile=jit, autograph=False)
        def train():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(layer(x, training=True)))
            return tape.gradient(loss, layer.trainable_weights)

        return lambda: [g.numpy() for g in train()]


class JaxRunner:
    jit_options = (True,)

    def __init__(self, device):
        import jax

        if device == "gpu" and jax.default_backend() != "gpu":
            sys.exit("parallel_recurrences.py: --device gpu: no GPU visible to JAX")

    def describe(self):
        import jax

        d = jax.devices()[0]
        return d.device_kind if d.platform == "gpu" else f"CPU, {os.cpu_count()} threads"

    def train_step(self, layer, x, jit):
        import jax
        import jax.numpy as jnp

        layer(x[:, :2])
        x = jnp.asarray(x)
        trainable = [v.value for v in layer.trainable_variables]
        frozen = [v.value for v in layer.non_trainable_variables]

        def loss(trainable):
            y, _ = layer.stateless_call(trainable, frozen, x, training=True)
            return jnp.mean(jnp.square(y))

        grad = jax.jit(jax.grad(loss))
        return lambda: jax.block_until_ready(grad(trainable))


class TorchRunner:
    jit_options = (False,)

    def __init__(self, device):
        import torch

        if device == "gpu" and not torch.cuda.is_available():
            sys.exit("parallel_recurrences.py: --device gpu: no GPU visible to torch")
        self.device = "cuda" if device == "gpu" else "cpu"

    def describe(self):
        import torch

        if self.device == "cuda":
            return torch.cuda.get_device_name(0)
        return f"CPU, {torch.get_num_threads()} threads"

    def train_step(self, layer, x, jit):
        import torch

        layer(x[:, :2])
        x = torch.as_tensor(x, device=self.device)

        def step():
            layer.zero_grad()
            loss = torch.mean(torch.square(layer(x, training=True)))
            loss.backward()
            if self.device == "cuda":  # wait for the kernels: CUDA calls return at once
                torch.cuda.synchronize()

        return step


def print_rows(rows):
    print("\n| backend | jit | T | layer | median ms (IQR) | ratio to GRU |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['backend']} | {r['jit']} | {r['T']} | {r['layer']} | "
              f"{r['median_ms']:.1f} ({100 * r['iqr']:.0f}%) | {r['ratio_to_gru']:.3f} |",
              flush=True)


def plot(rows, backend):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    jit_options = sorted({r["jit"] for r in rows})
    figure, axes = plt.subplots(1, len(jit_options), figsize=(6 * len(jit_options), 4.5),
                                squeeze=False)
    for axis, jit in zip(axes[0], jit_options):
        for name in dict.fromkeys(r["layer"] for r in rows):
            points = sorted((r["T"], r["median_ms"]) for r in rows
                            if r["layer"] == name and r["jit"] == jit)
            style = "--" if "step form" in name else ("-" if "scan" not in name else ":")
            axis.plot(*zip(*points), style, marker="o", label=name)
        axis.set(xscale="log", yscale="log", xlabel="T (steps)",
                 ylabel="training step, median ms",
                 title=f"{backend}, jit={jit}: B{B}, in {IN}, {U} units")
        axis.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    figure.tight_layout()
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "figures",
                        f"parallel_recurrences_{backend}.png")
    figure.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
