"""The recurrent loop's operations on TensorFlow (`keras_seq.layers.recurrent.backend` picks them).

`TensorFlowOps` has the same operations as `backend_jax.JaxOps` and
`backend_torch.TorchOps`. Its loop forms, which compute the same thing,
chosen by `TensorFlowOps.scan` for one call:

- training (``training=True``): ``tf.while_loop`` reading the per-step
  inputs from a ``TensorArray`` (``unstack``) and writing outputs into
  another. Its autodiff gradient is the cheapest: slicing ``x[t]`` in the
  loop instead makes the backward pass materialise a full ``(T, B, P)``
  tensor at every step. A cell with a TensorFlow gradient companion trains
  through `keras_seq.layers.recurrent.bptt_tensorflow` instead.
- inference (the convertible form): ``tf.while_loop`` reading with
  ``tf.gather`` and writing blocks of outputs with
  ``tf.tensor_scatter_nd_update`` into a preallocated tensor. TensorArray ops
  have no TFLite builtin form when the batch or length is dynamic, and
  tf2onnx cannot map them; these become the builtins WHILE, GATHER and
  SCATTER_ND (ONNX ``Loop``, ``Gather``, ``ScatterND``), so every exporter
  traces this form with no Flex delegate and no special mode.

(``unroll=True`` is a Python loop on every backend: `keras_seq.layers.recurrent.rnn`.)
The measurements behind these choices are in ``benchmarks/RESULTS.md``
("Recurrent family").
"""

from __future__ import annotations

import functools
import os
import statistics
import time
from collections.abc import Callable, Sequence

import tensorflow as tf

from keras_seq._validation import ArgumentValueError

# body(xs_t, carry) -> (outputs_t, carry), all lists.
BodyFn = Callable[[list, list], tuple]

# Steps per iteration of the while loops. An iteration costs a few
# control-flow ops per loop variable besides the step itself; at batch 1
# that is a large part of a step, and more steps per iteration pay it less
# often, for a bigger graph that takes longer to trace. Eight was the best
# trade-off measured (benchmarks/RESULTS.md, "Inference since run 5").
STEPS_PER_ITERATION = 8

# How `recurrent_matmul` computes a step's ``h @ U + b``: ``"fused"``
# (MatMul and BiasAdd, which oneDNN fuses with the step's next Add into one
# kernel) or ``"plain"`` (MatMul, then Add). Which is faster depends on the
# CPU, by a factor of 2-3 at batch 1 either way on the CPUs measured
# (benchmarks/RESULTS.md, "The step's matmul"), so neither is a default:
# ``"auto"`` (`KERAS_SEQ_STEP_MATMUL` unset) times both once per process
# (`calibrated_step_matmul`), and the variable fixes one instead. Read when
# this module is imported.
STEP_MATMUL_ENV = "KERAS_SEQ_STEP_MATMUL"
STEP_MATMUL_FORMS = ("plain", "fused")


def step_matmul_setting(environ) -> str:
    """``"plain"``, ``"fused"`` or ``"auto"``: what `KERAS_SEQ_STEP_MATMUL`
    says in ``environ`` (unset or empty: ``"auto"``)."""
    form = environ.get(STEP_MATMUL_ENV, "").strip().lower() or "auto"
    if form not in (*STEP_MATMUL_FORMS, "auto"):
        raise ArgumentValueError(
            f"Environment variable {STEP_MATMUL_ENV}", "expected 'plain', 'fused' or 'auto' "
            f"(or unset), received {environ[STEP_MATMUL_ENV]!r}."
        )
    return form


STEP_MATMUL = step_matmul_setting(os.environ)


def step_matmul_form() -> str:
    """The form of a step's ``h @ U + b`` in this process: `STEP_MATMUL`, or
    the calibrated one when it is ``"auto"``."""
    return calibrated_step_matmul() if STEP_MATMUL == "auto" else STEP_MATMUL


@functools.cache
def calibrated_step_matmul() -> str:
    """The faster form on this machine, timed once per process.

    An LSTM-sized step (256 units) in the inference loop (`_scan_convertible`,
    static shapes, as ``predict`` traces it), at batch 1 and 64, in both
    forms, interleaved; the form whose worse ratio to the faster one of the
    two batches is smaller. It runs eagerly the first time a layer's step is
    traced with ``"auto"`` (about 0.3 s; docs/contract.md, "Which form runs
    where"). With a GPU visible: ``"fused"``, untimed (oneDNN's kernels are
    the CPU's).
    """
    if TensorFlowOps.device() == "gpu":
        return "fused"
    with tf.init_scope():
        times = _time_step_matmul_forms()
    worst = {form: max(times[form][b] / min(times[f][b] for f in STEP_MATMUL_FORMS)
                       for b in times[form]) for form in STEP_MATMUL_FORMS}
    return min(STEP_MATMUL_FORMS, key=lambda form: (worst[form], form != "fused"))


def _time_step_matmul_forms(batches=(1, 64), steps=24, units=256, repeats=3) -> dict:
    """``{form: {batch: median seconds}}`` of the step loop in both forms."""
    # Stateless draws: a `tf.random.Generator` holds a variable, and a variable
    # created while a `tf.function` traces (this runs in the first trace of a
    # layer's step, under `tf.init_scope`) makes TensorFlow trace that
    # function a second time.
    U = tf.random.stateless_normal((units, 4 * units), seed=(0, 1), stddev=0.05)
    b = tf.random.stateless_normal((4 * units,), seed=(0, 2), stddev=0.05)
    times = {form: {} for form in STEP_MATMUL_FORMS}
    for batch in batches:
        xw = tf.random.stateless_normal((steps, batch, 4 * units), seed=(batch, 3))
        h0 = tf.zeros((batch, units))
        runs = {}
        for form in STEP_MATMUL_FORMS:
            def body(xs_t, carry, form=form):
                z = xs_t[0] + _step_matmul(carry[0], U, b, form)
                h = tf.tanh(z[:, :units]) * tf.sigmoid(z[:, units:2 * units])
                return [h], [h]

            runs[form] = tf.function(
                lambda xw, h0=h0, body=body: _scan_convertible(
                    body, [xw], [h0], [h0], True, STEPS_PER_ITERATION)[0][0],
                input_signature=[tf.TensorSpec(xw.shape, xw.dtype)], autograph=False)
            runs[form](xw)  # trace outside the timing
        samples = {form: [] for form in STEP_MATMUL_FORMS}
        for r in range(repeats):
            for form in (STEP_MATMUL_FORMS if r % 2 == 0 else STEP_MATMUL_FORMS[::-1]):
                start = time.perf_counter()
                runs[form](xw).numpy()
                samples[form].append(time.perf_counter() - start)
        for form in STEP_MATMUL_FORMS:
            times[form][batch] = statistics.median(samples[form])
    return times


def _step_matmul(h, kernel, bias, form: str):
    """``h @ kernel + bias`` in ``form`` (see `STEP_MATMUL_ENV`)."""
    if bias is None:
        return tf.matmul(h, kernel)
    if form == "fused":
        return tf.nn.bias_add(tf.matmul(h, kernel), bias)
    return tf.matmul(h, kernel) + bias


# The attribute of a traced graph that holds an exporter's lowering
# (`TensorFlowOps.export_lowering`).
LOWERING_ATTRIBUTE = "_keras_seq_lowering"


class TensorFlowOps:
    """The recurrent loop's operations on TensorFlow."""

    # --- operations whose TensorFlow form matters ---

    @staticmethod
    def project(x, kernel, bias=None):
        """``x @ kernel + bias`` over the last axis of a rank-2 or rank-3 ``x``.

        One 2-D matmul with ``bias_add``: TensorFlow fuses the pair into a single
        kernel and its bias gradient is one reduction. A rank-3 ``tf.matmul``
        would broadcast the kernel instead, and its kernel gradient builds and
        reduces a ``(T, in, P)`` tensor (slower to train).
        """
        features = tf.shape(x)[-1]
        y = tf.matmul(tf.reshape(x, [-1, features]), kernel)
        if bias is not None:
            y = tf.nn.bias_add(y, bias)
        if len(x.shape) == 2:
            return y
        return tf.reshape(y, tf.concat([tf.shape(x)[:-1], tf.shape(kernel)[-1:]], 0))

    @staticmethod
    def recurrent_matmul(h, kernel, bias):
        """``h @ kernel + bias`` for one step, in this process's form
        (`step_matmul_form`; under XLA both compile alike, and may differ in
        the last bit)."""
        return _step_matmul(h, kernel, bias, step_matmul_form())

    @staticmethod
    def matmul(a, b, transpose_a: bool = False, transpose_b: bool = False):
        """A batched matmul with optional transposes of the last two axes."""
        return tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)

    @staticmethod
    def split(x, sizes: Sequence[int] | int, axis: int = -1) -> list:
        """``x`` split into pieces of the static ``sizes`` (or ``sizes`` equal
        pieces). ``tf.split`` takes the sizes themselves: ``ops.split`` with
        indices computes them in the graph at every step."""
        return tf.split(x, sizes, axis=axis)

    @staticmethod
    def layer_norm(v, gamma, beta, epsilon: float):
        """``γ ⊙ (v − mean v) / sqrt(var v + ε) [+ β]`` over the last axis, in
        plain ops. (An XLA-compiled kernel for a whole sequence was faster
        at inference, but its call is an op that tf2onnx cannot convert:
        `keras.Model.export(format="onnx")` of a `LayerNormLSTM` failed;
        benchmarks/RESULTS.md, "One formulation per cell".)"""
        return _layer_norm_ops(v, gamma, beta, epsilon)

    @staticmethod
    def compiled_by_xla() -> bool:
        """Whether the code being traced now will be compiled by XLA: inside a
        ``tf.function(jit_compile=True)``, which is what Keras' ``jit_compile``
        builds. (TensorFlow's global auto-clustering is not seen.)"""
        # The flag is private to TensorFlow; Keras 2's layers read it the same way.
        from tensorflow.python.ops import control_flow_util

        return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())

    @staticmethod
    def device() -> str:
        """``"gpu"`` where TensorFlow sees a GPU (when the function is traced), else ``"cpu"``."""
        return "gpu" if tf.config.list_logical_devices("GPU") else "cpu"

    @staticmethod
    def fresh_states(states: list, stateful: bool) -> list:
        """The initial states as the loop may carry them (as they are)."""
        return states

    @staticmethod
    def export_lowering():
        """The exporter's lowering of the function being traced, or None.

        An exporter marks the graph of the function it converts with a
        lowering (`keras_seq.export` sets `LOWERING_ATTRIBUTE` on it while
        it traces); a recurrent layer traced in that graph, or in a graph
        nested in it (a loop body), asks that lowering for its operator
        form. The mark belongs to that trace alone: other functions, other
        threads and eager calls see none.
        """
        graph = tf.compat.v1.get_default_graph()
        while graph is not None:
            lowering = getattr(graph, LOWERING_ATTRIBUTE, None)
            if lowering is not None:
                return lowering
            graph = getattr(graph, "outer_graph", None)
        return None

    @staticmethod
    def convertible_inference(training) -> bool:
        """Whether this call is inference in the loop the exporters convert to
        builtin ops (`ConvertibleLSTM` runs it in place of Keras' own loop)."""
        return training is not True

    # The hand-written derivatives' training loop exists here (`run_manual_gradient`).
    MANUAL_GRADIENT_LOOP = True
    # The step loop under XLA is a while loop of TensorArrays, measured slower
    # to train than the parallel forms (benchmarks/RESULTS.md, "Parallel
    # recurrences"): no cell trains in it for speed.
    FUSED_STEP_LOOP = False

    @staticmethod
    def run_manual_gradient(gradient, xs, initial_states, **options):
        """A cell's training loop with its hand-written derivative
        (`keras_seq.layers.recurrent.bptt_tensorflow.run_bptt_recurrence`)."""
        from keras_seq.layers.recurrent.bptt_tensorflow import run_bptt_recurrence

        return run_bptt_recurrence(gradient, xs, initial_states, **options)

    @staticmethod
    def scan(body: BodyFn, sequences, carry, templates, collect: bool = True, training=None,
             steps_per_iteration: int | None = None):
        """Runs ``body`` over the time-major ``sequences`` in the form this call needs.

        Args:
            body: ``body(xs_t, carry) -> (outputs_t, carry)`` with ``xs_t`` the
                list of step-``t`` slices of ``sequences``, and lists for the rest.
            sequences: list of time-major ``(T, B, ...)`` tensors, same ``T``.
            carry: list of tensors carried between steps.
            templates: one ``(B, ...)`` tensor per output with the shape and
                dtype of that output at one step.
            collect: stack the outputs over time; else only the carry is returned.
            training: the call's ``training``; only ``True`` trains.
            steps_per_iteration: steps per while-loop iteration (default
                `STEPS_PER_ITERATION`).

        Returns:
            ``(outputs, carry)``: ``outputs`` a list of batch-major ``(B, T, ...)``
            tensors (``None`` when not collecting).
        """
        k = steps_per_iteration or STEPS_PER_ITERATION
        if training is True:
            return _scan_tensor_array(body, sequences, carry, templates, collect, k)
        return _scan_convertible(body, sequences, carry, templates, collect, k)

    @staticmethod
    def linear_scan(a, b, h0):
        """``h_t = a_t ⊙ h_{t-1} + b_t`` over axis 1 of ``(B, T, n)`` tensors,
        from ``h0 (B, n)``; returns ``h (B, T, n)``.

        With a GPU visible (when the function is traced), the parallel
        scan: ⌈log2 T⌉ passes that each compose every step with the one
        2^k steps before it (Hillis and Steele's doubling scan, `_doubling_scan`),
        for a static or dynamic length, with or without XLA. On the CPU a
        sequential loop compiled with XLA (`_linear_loop`), measured faster
        there (benchmarks/RESULTS.md, "Parallel recurrences"). Either way the
        gradient is the same recurrence run backwards
        (`_differentiable_linear_scan`). ``keras.ops.associative_scan`` is not
        used: on TensorFlow it fails under XLA and for a dynamic length.
        """
        return _differentiable_linear_scan(a, b, h0, TensorFlowOps.device() == "gpu")

def _layer_norm_ops(v, gamma, beta, epsilon):
    centred = v - tf.reduce_mean(v, axis=-1, keepdims=True)
    # γ ⊙ (v − μ) beside the variance: the chain of ops each waiting for the
    # last, which TensorFlow's executor pays per op, is one shorter.
    scaled = centred * gamma
    variance = tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True)
    normed = scaled * tf.math.rsqrt(variance + epsilon)
    return normed if beta is None else normed + beta


# --- the loops ---

def num_steps(x):
    """The length of a time-major tensor: static when known."""
    return x.shape[0] if x.shape[0] is not None else tf.shape(x)[0]


def _blocks(first, last, k, run, state):
    """``run`` over steps ``first .. last - 1``, ``k`` steps per iteration
    and the last ``(last - first) mod k`` one per iteration."""
    blocks = first + (last - first) // k * k
    state = run(first, blocks, k, *state)
    if k > 1:
        state = run(blocks, last, 1, *state)
    return state


def _scan_tensor_array(body: BodyFn, sequences, carry, templates, collect, k):
    """The training form (see the module docstring)."""
    steps = num_steps(sequences[0])
    input_tas = [
        tf.TensorArray(x.dtype, size=steps, element_shape=x.shape[1:]).unstack(x)
        for x in sequences
    ]
    # Empty TensorArrays keep the loop signature the same when not collecting.
    out_tas = [
        tf.TensorArray(t.dtype, size=steps if collect else 0, element_shape=t.shape)
        for t in templates
    ]

    def run(first, last, per_iteration, out_tas, carry):
        if isinstance(first, int) and isinstance(last, int) and last <= first:
            # No loop at all: XLA cannot differentiate a loop of zero iterations.
            return out_tas, carry

        def loop_body(t, out_tas, *carry):
            carry = list(carry)
            for i in range(per_iteration):
                outputs_t, carry = body([ta.read(t + i) for ta in input_tas], carry)
                if collect:
                    out_tas = [ta.write(t + i, o) for ta, o in zip(out_tas, outputs_t)]
            return (t + per_iteration, out_tas, *carry)

        result = tf.while_loop(
            lambda t, *_: t < last,
            loop_body,
            (tf.convert_to_tensor(first), out_tas, *carry),
            maximum_iterations=(last - first) // per_iteration,
            parallel_iterations=32,
        )
        return list(result[1]), list(result[2:])

    out_tas, carry = _blocks(0, steps, k, run, (out_tas, carry))
    if not collect:
        return None, carry
    return [_batch_major(ta.stack()) for ta in out_tas], carry


def _batch_major(x):
    """(T, B, ...) -> (B, T, ...)."""
    return tf.transpose(x, [1, 0, *range(2, len(x.shape))])


def _scan_convertible(body: BodyFn, sequences, carry, templates, collect, k):
    """The inference form (see the module docstring).

    TensorFlow copies the whole output tensor at every scatter, so ``k``
    steps run per loop iteration and their outputs are written as one block:
    a ``T``-step loop makes ``T / k`` copies instead of ``T``. (Sixteen steps
    per iteration, with the last steps written into a small buffer, made
    TensorFlow at batch 64 a little faster but the converted TFLite model
    much slower at batch 1; see benchmarks/RESULTS.md.)
    """
    steps = num_steps(sequences[0])
    batch = tf.shape(templates[0])[0] if templates else None
    # Batch-major buffers (B, T, ...), written at [b, t] index pairs: with an
    # empty batch the indices are empty too (a scatter of non-empty indices
    # into an empty tensor is an error), and no transpose is needed after.
    # An output with a zero-sized feature axis (the attention weights of a
    # decoder without attention) stays all zeros, for the same reason.
    empty_outputs = [0 in t.shape[1:] for t in templates]
    buffers = []
    if collect:
        buffers = [
            tf.zeros(tf.concat([tf.shape(t)[:1], tf.reshape(steps, [1]), tf.shape(t)[1:]], 0),
                     t.dtype)
            for t in templates
        ]

    def run(first, last, per_iteration, buffers, carry):
        if isinstance(first, int) and isinstance(last, int) and last <= first:
            return buffers, carry
        if collect:
            # [b] for every (b, i) of a block, built once outside the loop.
            batch_rows = tf.broadcast_to(
                tf.reshape(tf.range(batch), [-1, 1, 1]), tf.stack([batch, per_iteration, 1])
            )

        def loop_body(t, buffers, *carry):
            carry = list(carry)
            # t + constant offsets, not tf.range(t, t + k): XLA needs static range bounds.
            rows = t + tf.range(per_iteration)
            if per_iteration == 1:
                block = [[tf.gather(x, t)] for x in sequences]
            else:
                block = [tf.unstack(tf.gather(x, rows), per_iteration) for x in sequences]
            outputs = [[] for _ in templates]
            for i in range(per_iteration):
                outputs_t, carry = body([x[i] for x in block], carry)
                for collected, o in zip(outputs, outputs_t):
                    collected.append(o)
            if collect:
                time_rows = tf.broadcast_to(
                    tf.reshape(rows, [1, per_iteration, 1]), tf.shape(batch_rows)
                )
                indices = tf.concat([batch_rows, time_rows], -1)  # (B, k, 2): [b, t + i]
                buffers = [
                    b if empty else tf.tensor_scatter_nd_update(b, indices, tf.stack(o, axis=1))
                    for b, o, empty in zip(buffers, outputs, empty_outputs)
                ]
            return (t + per_iteration, buffers, *carry)

        result = tf.while_loop(
            lambda t, *_: t < last,
            loop_body,
            (tf.convert_to_tensor(first), buffers, *carry),
            maximum_iterations=(last - first) // per_iteration,
        )
        return list(result[1]), list(result[2:])

    buffers, carry = _blocks(0, steps, k, run, (buffers, carry))
    return (buffers if collect else None), carry


# --- the linear recurrence of the parallel recurrences ---


def _linear_loop(a, b, h0, reverse: bool):
    """``h_t = a_t ⊙ h_{t-1} + b_t`` step by step over axis 1 (or from the
    last step back, ``reverse``), ``STEPS_PER_ITERATION`` steps per iteration."""
    a_t = tf.transpose(a, (1, 0, 2))  # (T, B, n): a step is one contiguous row
    b_t = tf.transpose(b, (1, 0, 2))
    steps = num_steps(a_t)
    outputs = tf.TensorArray(a.dtype, size=steps, element_shape=h0.shape)

    def run(first, last, per_iteration, outputs, h):
        def body(i, outputs, h):
            for j in range(per_iteration):
                t = steps - 1 - (i + j) if reverse else i + j
                h = a_t[t] * h + b_t[t]
                outputs = outputs.write(t, h)
            return i + per_iteration, outputs, h

        if isinstance(first, int) and isinstance(last, int) and last <= first:
            return outputs, h
        _, outputs, h = tf.while_loop(
            lambda i, *_: i < last, body, (tf.convert_to_tensor(first), outputs, h),
            maximum_iterations=(last - first) // per_iteration,
        )
        return outputs, h

    outputs, _ = _blocks(0, steps, STEPS_PER_ITERATION, run, (outputs, h0))
    return _batch_major(outputs.stack())


# One compiled loop per shape, dtype and direction (TensorFlow traces it like
# any function; it holds no state of the package).
_compiled_linear_loop = tf.function(_linear_loop, jit_compile=True, reduce_retracing=True,
                                     autograph=False)


def _doubling_scan(a, b, h0, reverse: bool):
    """`_linear_loop`'s result in ⌈log2 T⌉ parallel passes (Hillis and
    Steele): after the pass of offset s, (A_t, B_t) composes the steps
    t−2s+1 … t, so that h_t = A_t ⊙ h0 + B_t once s ≥ T. Each pass is O(T)
    elementwise work over the whole sequence."""
    if reverse:
        a, b = tf.reverse(a, [1]), tf.reverse(b, [1])
    steps = tf.shape(a)[1]
    time = tf.range(steps)[None, :, None]

    def compose(offset, a, b):
        # (a, b) of step t after (a, b) of step t − offset (identity before
        # step 0). A roll and a select, not slices of a dynamic size, which
        # XLA would compile to other numbers.
        has_before = time >= offset
        a_before = tf.where(has_before, tf.roll(a, offset, axis=1), tf.ones_like(a))
        b_before = tf.where(has_before, tf.roll(b, offset, axis=1), tf.zeros_like(b))
        return offset * 2, a * a_before, a * b_before + b

    _, a, b = tf.while_loop(lambda offset, *_: offset < steps, compose,
                            (tf.constant(1), a, b))
    h = a * h0[:, None] + b
    return tf.reverse(h, [1]) if reverse else h


def _linear_scan(parallel: bool):
    return _doubling_scan if parallel else _compiled_linear_loop


def _differentiable_linear_scan(a, b, h0, parallel: bool):
    """`TensorFlowOps.linear_scan` with its gradient: with g_t = ∂L/∂h_t
    through all later steps, g_t = dh_t + a_{t+1} ⊙ g_{t+1} (the same
    recurrence, backwards), ∂L/∂a_t = g_t ⊙ h_{t-1}, ∂L/∂b_t = g_t and
    ∂L/∂h0 = a_1 ⊙ g_1."""
    scan = _linear_scan(parallel)

    @tf.custom_gradient
    def run(a, b, h0):
        # stop_gradient: a tape must not differentiate the scan itself (the
        # compiled loop's state cannot cross the XLA boundary); `grad` is its
        # gradient.
        h = scan(*(tf.stop_gradient(t) for t in (a, b, h0)), False)
        # reduce_retracing relaxes the loop's shapes once it sees several: the
        # result keeps the static shape of b for the layers after it.
        h = tf.ensure_shape(h, b.shape)

        def grad(dh):
            a_next = tf.concat([a[:, 1:], tf.zeros_like(a[:, :1])], axis=1)
            g = scan(tf.stop_gradient(a_next), tf.stop_gradient(dh), tf.zeros_like(h0), True)
            g = tf.ensure_shape(g, b.shape)
            h_prev = tf.concat([h0[:, None], h[:, :-1]], axis=1)
            return g * h_prev, g, a[:, 0] * g[:, 0]

        return h, grad

    return run(a, b, h0)
