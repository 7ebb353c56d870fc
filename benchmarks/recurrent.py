"""Speed of the recurrent family against the Keras built-ins (not a test).

Times one batch of inference (forward, ``training=False``) and of a training
step (forward + backward giving the gradients of all trainable weights) for
PeepholeLSTM, CoupledGateLSTM, GRU and LayerNormLSTM against keras.layers.LSTM /
keras.layers.GRU with the same shapes, on one Keras backend and device:

- TensorFlow: ``tf.function``, without and with ``jit_compile=True`` (on a GPU
  Keras' own layers take their cuDNN path where they can);
- JAX: ``jax.jit`` of ``layer.stateless_call``, ``jax.value_and_grad`` for
  the training step;
- torch: eager calls, ``loss.backward()`` for the training step and
  ``torch.no_grad()`` for inference; with ``--torch-step`` also the same
  calls captured once as a CUDA graph and replayed (``graph``, GPU only), or
  compiled by ``torch.compile`` (``compile``; the first call, timed apart
  and printed, traces and compiles the whole unrolled loop).

Next to them a *matmul floor* per shape family (P = 4u for the LSTM shapes, 3u
for the GRU and CIFG shapes): a loop doing only the matmuls a step cannot do
without, written with the backend's own loop. Inference: the input projection
``(B*T, in) @ (in, P)`` once and T steps of ``(B, u) @ (u, P)``; training adds
T steps of ``(B, P) @ (P, u)`` and the kernel gradients ``(in, B*T) @ (B*T, P)``
and ``(u, B*T) @ (B*T, P)`` (no input gradient, which a first layer does not
need). Its ratio to Keras says how much of Keras' time the matmuls alone take;
a layer's ratio to its floor, how much it spends beyond them.

All candidates of one setting run interleaved in one process (repetition r
times every candidate once, in a rotating order) so that load from other
processes hits them alike. The table reports the median and the minimum time
per batch and the relative interquartile range (how noisy the machine was);
the ratios are of medians. The jit column is True where XLA compiles the
step (TensorFlow's ``jit_compile=True``, every JAX row); on torch it names
the step (``eager``, ``graph``, ``compile``). A candidate that fails
is reported as an error row and the others still run.

    python benchmarks/recurrent.py                        # TF, CPU: B64 T100 in128 u256 + B1
    python benchmarks/recurrent.py --backend jax --device gpu
    python benchmarks/recurrent.py --backend torch --repeats 5 --batches 64
    python benchmarks/recurrent.py --backend torch --device gpu --torch-step eager,graph
    python benchmarks/recurrent.py --layers "LayerNormLSTM,keras LSTM" --batches 64
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

LAYERS = ["PeepholeLSTM", "CoupledGateLSTM", "GRU", "LayerNormLSTM", "keras LSTM", "keras GRU"]
FLOORS = {"floor P=4u": 4, "floor P=3u": 3}  # name: P / u
REFERENCE = {  # the Keras layer each row is compared with
    "PeepholeLSTM": "keras LSTM",
    "CoupledGateLSTM": "keras LSTM",
    "GRU": "keras GRU",
    "LayerNormLSTM": "keras LSTM",
    "keras LSTM": "keras LSTM",
    "keras GRU": "keras GRU",
    "floor P=4u": "keras LSTM",
    "floor P=3u": "keras GRU",
}
FLOOR_OF = {  # the floor with the same matmul shapes
    "PeepholeLSTM": "floor P=4u",
    "CoupledGateLSTM": "floor P=3u",
    "GRU": "floor P=3u",
    "LayerNormLSTM": "floor P=4u",
    "keras LSTM": "floor P=4u",
    "keras GRU": "floor P=3u",
}
OURS = {"PeepholeLSTM", "CoupledGateLSTM", "GRU", "LayerNormLSTM"}


def _no_device(backend, device):
    sys.exit(f"recurrent.py: --device {device}: no {device.upper()} visible to {backend}")


def _hide_gpus_from_tensorflow():
    """Keep TensorFlow, where it is installed, off the GPU that JAX or torch
    measure on (JAX takes most of its memory up front)."""
    try:
        import tensorflow as tf
    except ImportError:  # a GPU machine with JAX or torch only
        return
    tf.config.set_visible_devices([], "GPU")


class TensorFlowBackend:
    name = "tensorflow"
    jit_options = (False, True)

    def __init__(self, device: str):
        import tensorflow as tf

        self.tf = tf
        # Every candidate is a fresh tf.function: the retracing warnings are expected.
        tf.get_logger().setLevel("ERROR")
        if device == "gpu" and not tf.config.list_physical_devices("GPU"):
            _no_device("TensorFlow", device)
        if device == "cpu":
            tf.config.set_visible_devices([], "GPU")
        self.place = "GPU:0" if device == "gpu" else "CPU:0"

    def describe(self) -> str:
        tf = self.tf
        if self.place == "GPU:0":
            gpu = tf.config.list_physical_devices("GPU")[0]
            return tf.config.experimental.get_device_details(gpu).get("device_name", "GPU")
        return f"CPU, {os.cpu_count()} threads"

    def version(self) -> str:
        return f"TensorFlow {self.tf.__version__}"

    def tensor(self, array):
        with self.tf.device(self.place):
            return self.tf.identity(array)

    def block(self, result):
        self.tf.nest.map_structure(lambda t: t.numpy(), result)

    def layer_steps(self, layer, x, jit):
        tf = self.tf

        # x is an argument, as Keras' predict and fit pass their batches: a
        # tensor captured as a constant would let TensorFlow fold the input
        # projection into a constant, which some kernels then read slowly
        # (benchmarks/RESULTS.md, "One formulation per cell").
        @tf.function(jit_compile=jit)
        def forward(x):
            return layer(x, training=False)

        @tf.function(jit_compile=jit)
        def train(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(layer(x, training=True)))
            return tape.gradient(loss, layer.trainable_weights)

        return {"forward": lambda: forward(x), "train": lambda: train(x)}

    def floor_steps(self, x, W, U, jit):
        tf = self.tf
        T, B, n_in = x.shape
        u, P = U.shape

        def block_sum(z):  # (B, P) -> (B, u), every column of z used
            return tf.reduce_sum(tf.reshape(z, (B, P // u, u)), axis=1)

        def forward_loop(x):
            xw = tf.reshape(tf.reshape(x, (T * B, n_in)) @ W, (T, B, P))
            h = tf.zeros((B, u))
            hs = tf.TensorArray(tf.float32, size=T)
            for t in tf.range(T):
                h = tf.tanh(block_sum(xw[t] + h @ U))
                hs = hs.write(t, h)
            return hs.stack()  # (T, B, u)

        @tf.function(jit_compile=jit)
        def forward(x):
            return forward_loop(x)

        @tf.function(jit_compile=jit)
        def train(x):
            hs = forward_loop(x)
            dh = tf.zeros((B, u))
            dzs = tf.TensorArray(tf.float32, size=T)
            for t in tf.range(T - 1, -1, -1):
                dz_t = tf.tile(dh + hs[t], (1, P // u))
                dzs = dzs.write(t, dz_t)
                dh = tf.tanh(tf.matmul(dz_t, U, transpose_b=True))  # (B, P) @ (P, u)
            dz = tf.reshape(dzs.stack(), (T * B, P))
            dW = tf.matmul(tf.reshape(x, (T * B, n_in)), dz, transpose_a=True)
            dU = tf.matmul(tf.reshape(hs, (T * B, u)), dz, transpose_a=True)
            return dW, dU

        return {"forward": lambda: forward(x), "train": lambda: train(x)}


class JaxBackend:
    name = "jax"
    jit_options = (True,)

    def __init__(self, device: str):
        if device == "cpu":
            os.environ["JAX_PLATFORMS"] = "cpu"
        import jax

        self.jax = jax
        if device == "gpu" and jax.default_backend() != "gpu":
            _no_device("JAX", device)
        if device == "gpu":
            _hide_gpus_from_tensorflow()

    def describe(self) -> str:
        d = self.jax.devices()[0]
        return d.device_kind if d.platform == "gpu" else f"CPU, {os.cpu_count()} threads"

    def version(self) -> str:
        import jaxlib

        return f"JAX {self.jax.__version__} (jaxlib {jaxlib.__version__})"

    def tensor(self, array):
        return self.jax.numpy.asarray(array)

    def block(self, result):
        self.jax.block_until_ready(result)

    def layer_steps(self, layer, x, jit):
        jax, jnp = self.jax, self.jax.numpy
        trainable = [v.value for v in layer.trainable_variables]
        non_trainable = [v.value for v in layer.non_trainable_variables]

        @jax.jit
        def forward(trainable, non_trainable, x):
            y, _ = layer.stateless_call(trainable, non_trainable, x, training=False)
            return y

        def loss(trainable, non_trainable, x):
            y, non_trainable = layer.stateless_call(trainable, non_trainable, x, training=True)
            return jnp.mean(jnp.square(y)), non_trainable

        train = jax.jit(jax.value_and_grad(loss, has_aux=True))
        return {"forward": lambda: forward(trainable, non_trainable, x),
                "train": lambda: train(trainable, non_trainable, x)}

    def floor_steps(self, x, W, U, jit):
        jax, jnp = self.jax, self.jax.numpy
        T, B, n_in = x.shape
        u, P = U.shape

        def block_sum(z):  # (B, P) -> (B, u), every column of z used
            return z.reshape(B, P // u, u).sum(axis=1)

        def forward_loop(x, W, U):
            xw = (x.reshape(T * B, n_in) @ W).reshape(T, B, P)

            def step(h, xw_t):
                h = jnp.tanh(block_sum(xw_t + h @ U))
                return h, h

            _, hs = jax.lax.scan(step, jnp.zeros((B, u)), xw)
            return hs  # (T, B, u)

        @jax.jit
        def train(x, W, U):
            hs = forward_loop(x, W, U)

            def step(dh, h_t):
                dz_t = jnp.tile(dh + h_t, (1, P // u))
                return jnp.tanh(dz_t @ U.T), dz_t  # (B, P) @ (P, u)

            _, dz = jax.lax.scan(step, jnp.zeros((B, u)), hs, reverse=True)
            dz = dz.reshape(T * B, P)
            return x.reshape(T * B, n_in).T @ dz, hs.reshape(T * B, u).T @ dz

        forward = jax.jit(forward_loop)
        return {"forward": lambda: forward(x, W, U), "train": lambda: train(x, W, U)}


class TorchBackend:
    name = "torch"
    jit_options = ("eager",)
    STEPS = ("eager", "graph", "compile")

    def __init__(self, device: str):
        import torch

        self.torch = torch
        if device == "gpu" and not torch.cuda.is_available():
            _no_device("torch", device)
        self.device = "cuda" if device == "gpu" else "cpu"
        os.environ["KERAS_TORCH_DEVICE"] = self.device  # where Keras puts the weights
        if device == "gpu":
            _hide_gpus_from_tensorflow()

    def describe(self) -> str:
        torch = self.torch
        if self.device == "cuda":
            return torch.cuda.get_device_name(0)
        return f"CPU, {torch.get_num_threads()} threads"

    def version(self) -> str:
        return f"torch {self.torch.__version__}"

    def tensor(self, array):
        return self.torch.as_tensor(array, device=self.device)

    def block(self, result):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def stepped(self, fns, step, label):
        """The eager functions ``fns`` run as ``step``: unchanged, replayed from
        one CUDA graph each, or ``torch.compile``d. A graph is captured and a
        function compiled at its first call (the warm-up), which is timed
        apart; a failure there becomes the row's error."""
        if step == "eager":
            return fns

        def lazy(mode, fn):
            made = []

            def call():
                if not made:
                    start = time.perf_counter()
                    made.append(self._graphed(fn) if step == "graph" else self._compiled(fn))
                    seconds = time.perf_counter() - start
                    print(f"{step}: {label} {mode} ready in {seconds:.1f} s", file=sys.stderr,
                          flush=True)
                return made[0]()

            return call

        return {mode: lazy(mode, fn) for mode, fn in fns.items()}

    def _graphed(self, fn):
        """``fn`` captured once as a CUDA graph (after warm-up calls on a side
        stream, as torch's documentation asks); each call replays it and
        returns the tensors of the captured call, overwritten in place."""
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = fn()

        def replay():
            graph.replay()
            return captured

        return replay

    def _compiled(self, fn):
        compiled = self.torch.compile(fn)
        compiled()  # trace and compile here, timed apart from the repetitions
        self.block(None)
        return compiled

    def layer_steps(self, layer, x, jit):
        torch = self.torch
        weights = [v.value for v in layer.trainable_variables]

        def forward():
            with torch.no_grad():
                return layer(x, training=False)

        def train():
            for w in weights:
                w.grad = None
            loss = torch.mean(torch.square(layer(x, training=True)))
            loss.backward()
            return [w.grad for w in weights]

        label = f"{type(layer).__module__.split('.')[0]} {type(layer).__name__}"
        return self.stepped({"forward": forward, "train": train}, jit, label)

    def floor_steps(self, x, W, U, jit):
        torch = self.torch
        T, B, n_in = x.shape
        u, P = U.shape

        def block_sum(z):  # (B, P) -> (B, u), every column of z used
            return z.reshape(B, P // u, u).sum(dim=1)

        @torch.no_grad()
        def forward():
            xw = (x.reshape(T * B, n_in) @ W).reshape(T, B, P)
            h = x.new_zeros((B, u))
            hs = x.new_empty((T, B, u))
            for t in range(T):
                h = torch.tanh(block_sum(xw[t] + h @ U))
                hs[t] = h
            return hs

        @torch.no_grad()
        def train():
            hs = forward()
            dh = x.new_zeros((B, u))
            dz = x.new_empty((T, B, P))
            for t in reversed(range(T)):
                dz[t] = (dh + hs[t]).repeat(1, P // u)
                dh = torch.tanh(dz[t] @ U.T)  # (B, P) @ (P, u)
            dz = dz.reshape(T * B, P)
            return x.reshape(T * B, n_in).T @ dz, hs.reshape(T * B, u).T @ dz

        return self.stepped({"forward": forward, "train": train}, jit, f"floor P={P // u}u")


BACKENDS = {b.name: b for b in (TensorFlowBackend, JaxBackend, TorchBackend)}


def _make_layer(name, units):
    import keras

    from keras_seq import layers

    factory = {
        "PeepholeLSTM": layers.PeepholeLSTM,
        "CoupledGateLSTM": layers.CoupledGateLSTM,
        "GRU": layers.GRU,
        "LayerNormLSTM": layers.LayerNormLSTM,
        "keras LSTM": keras.layers.LSTM,
        "keras GRU": keras.layers.GRU,
    }[name]
    return factory(units, return_sequences=True)


def _error(exc):
    message = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {message[0][:120]}" if message else type(exc).__name__
    return text.replace("|", "/")


def _candidates(backend, batch, steps, features, units, jit, seed=0):
    """{name: {mode: fn}} for the layers and the floors, and {name: error} for
    the layers that could not be built."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, steps, features)).astype(np.float32)
    fns, errors = {}, {}
    for name in LAYERS:
        try:
            layer = _make_layer(name, units)
            layer.build((batch, steps, features))
            fns[name] = backend.layer_steps(layer, backend.tensor(x), jit)
        except Exception as exc:  # reported as an error row, the others still run
            errors[name] = _error(exc)
    x_time_major = backend.tensor(np.ascontiguousarray(x.transpose(1, 0, 2)))
    for name, gates in FLOORS.items():
        W = rng.normal(size=(features, gates * units)) / np.sqrt(features)
        U = rng.normal(size=(units, gates * units)) / np.sqrt(units)
        fns[name] = backend.floor_steps(x_time_major, backend.tensor(W.astype(np.float32)),
                                        backend.tensor(U.astype(np.float32)), jit)
    return fns, errors


def _time_once(backend, fn, iterations):
    start = time.perf_counter()
    for _ in range(iterations):
        result = fn()
    backend.block(result)  # wait for the last call
    return (time.perf_counter() - start) / iterations


def measure(backend, batch, steps, features, units, jit, modes, repeats, iterations):
    """{(name, mode): (median s, min s, relative IQR) or error text}, interleaved."""
    fns, errors = _candidates(backend, batch, steps, features, units, jit)
    results = {(name, mode): errors[name] for name in errors for mode in modes}
    keys = []
    for name in fns:  # trace, compile and warm up outside the timing
        for mode in modes:
            try:
                _time_once(backend, fns[name][mode], 2)
                keys.append((name, mode))
            except Exception as exc:
                results[(name, mode)] = _error(exc)
    samples = {key: [] for key in keys}
    for r in range(repeats):
        shift = r % len(keys) if keys else 0
        for name, mode in keys[shift:] + keys[:shift]:
            samples[(name, mode)].append(_time_once(backend, fns[name][mode], iterations))
    for key, values in samples.items():
        results[key] = (statistics.median(values), min(values), _spread(values))
    return results


def _spread(values):
    """Relative interquartile range: how noisy the machine was."""
    q = np.percentile(values, [25, 75])
    return float((q[1] - q[0]) / np.median(values))


def _ratio(results, key, other, bold):
    if key == other or not isinstance(results.get(other), tuple):
        return "—"
    ratio = f"{results[key][0] / results[other][0]:.2f}"
    return f"**{ratio}**" if bold else ratio


def rows(backend, device, batches, steps, features, units, repeats, iterations):
    """Yields the table's rows, one setting (batch, jit) at a time."""
    for batch in batches:
        modes = ("forward", "train") if batch > 1 else ("forward",)
        for jit in backend.jit_options:
            results = measure(backend, batch, steps, features, units, jit, modes,
                              repeats, iterations)
            for mode in modes:
                for name in LAYERS + list(FLOORS):
                    head = f"| {backend.name} | {device} | {batch} | {jit} | {mode} | {name} |"
                    result = results[(name, mode)]
                    if isinstance(result, str):
                        yield f"{head} error: {result} | | | |"
                        continue
                    med, low, spread = result
                    key, bold = (name, mode), name in OURS
                    to_keras = _ratio(results, key, (REFERENCE[name], mode), bold)
                    to_floor = _ratio(results, key, (FLOOR_OF.get(name, name), mode), bold)
                    yield (f"{head} {1e3 * med:.1f} ({100 * spread:.0f}%) | {1e3 * low:.1f} "
                           f"| {to_keras} | {to_floor} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=sorted(BACKENDS), default="tensorflow")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--batches", default="64,1",
                        help="comma-separated batch sizes; batch 1 times inference only")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--torch-step", default="eager",
                        help="torch only: comma-separated subset of eager, graph (CUDA graph "
                             "replay, GPU only), compile (torch.compile)")
    parser.add_argument("--layers", default=None,
                        help="comma-separated subset of " + ", ".join(LAYERS) + " (default: all)")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if args.layers:
        chosen = [name.strip() for name in args.layers.split(",")]
        unknown = sorted(set(chosen) - set(LAYERS))
        if unknown:
            parser.error(f"--layers: unknown {unknown}; choose from {LAYERS}")
        LAYERS[:] = [name for name in LAYERS if name in chosen]
    steps = [step.strip() for step in args.torch_step.split(",")]
    if set(steps) - set(TorchBackend.STEPS):
        parser.error(f"--torch-step: unknown {sorted(set(steps) - set(TorchBackend.STEPS))}; "
                     f"choose from {list(TorchBackend.STEPS)}")
    if steps != ["eager"] and args.backend != "torch":
        parser.error("--torch-step: only with --backend torch")
    if "graph" in steps and args.device != "gpu":
        parser.error("--torch-step graph: CUDA graphs need --device gpu")
    TorchBackend.jit_options = tuple(steps)

    os.environ["KERAS_BACKEND"] = args.backend  # before anything imports Keras
    backend = BACKENDS[args.backend](args.device)
    import keras

    print(f"Keras {keras.__version__} on {backend.version()}, device: {backend.describe()}")
    print(f"T={args.steps} in={args.features} u={args.units}, return_sequences=True, "
          f"{args.repeats} interleaved repetitions x {args.iterations} calls; "
          f"load average before: {os.getloadavg()[0]:.1f}\n")
    print("| backend | device | batch | jit | mode | layer | median ms (IQR) | min ms "
          "| ratio to Keras (medians) | ratio to floor (medians) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows(backend, args.device, batches, args.steps, args.features, args.units,
                    args.repeats, args.iterations):
        print(row, flush=True)
    after = f"load average after: {os.getloadavg()[0]:.1f}"
    if args.backend == "tensorflow":
        # KERAS_SEQ_STEP_MATMUL, or the form timed once in this process (auto).
        from keras_seq.layers.recurrent.backend_tensorflow import STEP_MATMUL, step_matmul_form

        after = f"step matmul form: {step_matmul_form()} ({STEP_MATMUL}); {after}"
    print(f"\n{after}")


if __name__ == "__main__":
    main()
