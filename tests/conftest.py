"""Shared test setup: TensorFlow backend, quiet logs, and a clean dtype policy."""

import gc
import os
import socket
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# tf2onnx's graph optimisers in place, without a copy of the graph per
# optimiser (a quarter of each conversion): for Keras' own `model.export(...,
# format="onnx")` too, which keras_seq.export does not wrap. An optimiser
# that fails is then an error instead of being skipped: stricter, not looser.
os.environ.setdefault("TF2ONNX_CATCH_ERRORS", "FALSE")
# The shared case lists next to this file (recurrent_family.py) import as modules.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# The backend Keras takes: the environment variable comes before its config file.
BACKEND = os.environ["KERAS_BACKEND"]


def pytest_configure(config):
    """Keras is imported here, in a process that runs tests: the controller
    of tests/run.sh's two TensorFlow workers (``-n 2``) hands them tests and
    runs none, and never imports it (TensorFlow's import, 7 CPU-seconds)."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return
    import keras

    assert keras.backend.backend() == BACKEND
    if BACKEND == "torch":
        import torch

        tensor_array = torch.Tensor.__array__

        def detached_array(self, *args, **kwargs):
            # np.asarray(layer(x)) in a test, as on the other backends: a tensor
            # that requires grad cannot become an array until it is detached.
            return tensor_array(self.detach().cpu(), *args, **kwargs)

        torch.Tensor.__array__ = detached_array


# The files that take longest in tests/run.sh's TensorFlow run, longest
# first (measured: benchmarks/RESULTS.md, "The test suite").
LONGEST_FILES = ("test_keras_export_paths.py", "test_doc_snippets_guides.py", "test_cli.py",
                 "test_doc_snippets.py", "test_classify_task.py", "test_resume.py",
                 "test_export_verify.py", "test_decoding.py")


def pytest_collection_modifyitems(config, items):
    """The longest files run first, then the other files with a test marked
    ``slow``, then the rest, each file's tests in order: tests/run.sh hands
    whole files to two workers in this order (``--no-loadscope-reorder``),
    and the short files then fill both workers' last minutes instead of one
    long file. On JAX and PyTorch, tests marked ``tensorflow_only``
    (TensorFlow's own loops, the hand-written BPTT, export, tf.function) are
    skipped."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}

    def rank(item):
        name = item.path.name
        longest = LONGEST_FILES.index(name) if name in LONGEST_FILES else len(LONGEST_FILES)
        return longest, item.path not in slow_files

    items.sort(key=rank)  # stable: each file's tests keep their order
    if BACKEND == "tensorflow":
        return
    skip = pytest.mark.skip(reason=f"TensorFlow-only path; Keras runs on {BACKEND}")
    for item in items:
        if item.get_closest_marker("tensorflow_only"):
            item.add_marker(skip)


def pytest_collection_finish(session):
    """Everything imported so far (TensorFlow, Keras, the test modules) is
    left out of every later garbage collection (`gc.freeze`): Keras collects
    all garbage each time a layer drops a variable, and Python itself every
    so many allocations, and each full pass over TensorFlow's objects took
    about 0.3 s. A test process only; what the tests compute is the same."""
    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After each test (and the fixtures it ends), what it left is collected
    once and the rest frozen in turn: a full collection (Keras runs one for
    each variable a layer drops, 57 when `quantize` rebuilds the Transformer
    blocks' Dense layers) then walks the objects of the test that runs, not
    those of every test before it in this process: 0.74 s a collection after
    a thousand tests. Cyclic garbage of a module fixture that ends later is
    left uncollected; the largest process's memory measured the same."""
    yield
    gc.collect()
    gc.freeze()


def pytest_unconfigure(config):
    """What the tests left is frozen too: the process ends next, and Python's
    last collections at exit would walk it (0.8 s after 69 layer and
    decoding tests; keras_seq_command.console does the same for the command)."""
    gc.freeze()


@pytest.fixture(autouse=True)
def _command_errors_in_the_commands_words(monkeypatch):
    """Every error line a test makes ``keras-seq`` print keeps the rule of
    tests/cli_errors.py (named once, in the command's words): checked as the
    test ends, on each line it triggered."""
    from cli_errors import violations

    import keras_seq.cli as cli

    lines = []
    line_of = cli.failure_line

    def recording(*args, **kwargs):
        lines.append(line_of(*args, **kwargs))
        return lines[-1]

    monkeypatch.setattr(cli, "failure_line", recording)
    yield
    broken = {line: violations(line) for line in lines if violations(line)}
    if broken:
        pytest.fail(f"keras-seq error lines that speak Python: {broken}")


@pytest.fixture(autouse=True)
def _reset_dtype_policy():
    """Mixed-precision tests must not leak their global policy into others."""
    yield
    import keras

    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def local_workers():
    """``local_workers(n)``: ``n`` free ``127.0.0.1:port`` addresses for a
    multi-worker TF_CONFIG (local processes only)."""

    def addresses(n):
        sockets = [socket.socket() for _ in range(n)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        ports = [s.getsockname()[1] for s in sockets]
        for s in sockets:
            s.close()
        return [f"127.0.0.1:{port}" for port in ports]

    return addresses


def _k_max_reference(x, mask, k):
    """k-max pooling from its definition (Kalchbrenner et al. 2014, §3.3), in NumPy.

    ``x`` (B, T, F), ``mask`` (B, T) bool or None, ``k`` an int or one int per
    sequence; returns ``(B, max k, F)``: per row and feature, the values of the
    k largest valid steps (ties: the earlier step) in time order, then zeros.
    """
    batch, steps, features = x.shape
    ks = np.broadcast_to(np.asarray(k), (batch,))
    out = np.zeros((batch, int(ks.max()), features), x.dtype)
    for b in range(batch):
        valid = [t for t in range(steps) if mask is None or mask[b, t]]
        for f in range(features):
            ranked = sorted(valid, key=lambda t: (-x[b, t, f], t))[: ks[b]]
            chosen = sorted(ranked)
            out[b, : len(chosen), f] = x[b, chosen, f]
    return out


@pytest.fixture
def k_max_reference():
    return _k_max_reference


def _gradients(loss_fn, inputs=(), variables=()):
    """``(loss, grads)``: the scalar ``loss_fn(*inputs)`` and its gradients with
    respect to the arrays ``inputs`` and then the Keras ``variables``, as NumPy
    (``None`` where the loss does not depend on one), by the backend's own
    autodiff: ``tf.GradientTape``, ``jax.value_and_grad`` or torch autograd."""
    import keras
    from keras import ops

    if BACKEND == "tensorflow":
        import tensorflow as tf

        xs = [tf.convert_to_tensor(a) for a in inputs]
        with tf.GradientTape() as tape:
            tape.watch(xs)
            loss = loss_fn(*xs)
        grads = tape.gradient(loss, [*xs, *variables])
    elif BACKEND == "jax":
        import jax

        def stateless_loss(xs, values):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return loss_fn(*xs)

        xs = [ops.convert_to_tensor(a) for a in inputs]
        loss, (x_grads, variable_grads) = jax.value_and_grad(stateless_loss, argnums=(0, 1))(
            xs, [v.value for v in variables]
        )
        grads = [*x_grads, *variable_grads]
    elif BACKEND == "torch":
        import torch

        xs = [ops.convert_to_tensor(a).requires_grad_(True) for a in inputs]
        loss = loss_fn(*xs)
        grads = torch.autograd.grad(loss, [*xs, *(v.value for v in variables)], allow_unused=True)
    else:
        raise NotImplementedError(f"no gradients helper for the {BACKEND} backend")
    return ops.convert_to_numpy(loss), [
        None if g is None else ops.convert_to_numpy(g) for g in grads
    ]


@pytest.fixture
def gradients():
    """``gradients(loss_fn, inputs, variables)``: see `_gradients`."""
    return _gradients


# ---------------------------------------------------------------------------
# Tiny training runs, shared by the training, command-line and export tests

TINY_RUN = dict(train_size=300, validation_size=30, test_size=40, units=16, batch_size=32,
                epochs=1, verbose=0)


def _as_arguments(options):
    """``{"train_size": 300}`` -> ``["--train-size", "300"]``."""
    return [a for k, v in options.items() for a in (f"--{k.replace('_', '-')}", str(v))]


@pytest.fixture
def interrupted_run(monkeypatch):
    """``interrupted_run(**options)``: `keras_seq.training.train` stopped right
    after its first epoch's backup (a ``KeyboardInterrupt`` where the history
    row would be written), as a kill would stop it."""
    from keras_seq import training
    from keras_seq.training import backup

    def crash(self, epoch, logs=None):
        raise KeyboardInterrupt

    def run(**options):
        with monkeypatch.context() as patch:
            patch.setattr(backup.History, "on_epoch_end", crash)
            with pytest.raises(KeyboardInterrupt):
                training.train(**options)

    return run


@pytest.fixture(scope="session")
def tiny_run_options():
    """The options of the tiny date run, for `keras_seq.training.TrainingConfig`."""
    return dict(TINY_RUN)


@pytest.fixture(scope="session")
def tiny_run_args():
    """The same options as ``keras-seq train`` arguments."""
    return _as_arguments(TINY_RUN)


@pytest.fixture(scope="session")
def tiny_date_run(tmp_path_factory):
    """The tiny date run (`keras_seq.training.train`, run folder ``.../dates``),
    trained once per test process; ``train_step_traces`` counts the traces of
    the train step."""
    import keras

    from keras_seq import training

    out = tmp_path_factory.mktemp("runs")
    traces = []
    original = keras.Model.train_step

    def counted(self, data):  # runs once per trace of Keras' train function
        traces.append(1)
        return original(self, data)

    keras.Model.train_step = counted
    try:
        run = training.train(training.TrainingConfig(out=str(out), name="dates", **TINY_RUN))
    finally:
        keras.Model.train_step = original
    run.train_step_traces = len(traces)
    return run
