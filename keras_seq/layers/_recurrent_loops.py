"""The plain time loops shared by every recurrent layer and the seq2seq decoder.

A recurrent layer hands the loops the input projection ``x @ W`` for all time
steps at once (one large matmul outside the loop; the bias is added there or
by the step after ``h @ U``, see `recurrent_matmul`) and a ``step`` function
that does only the recurrent part. `choose_loop` picks, for one call, which
of these forms runs it; they compute the same thing:

- ``"tensor_array"`` (training; `scan_tensor_array`): ``tf.while_loop``
  reading the per-step projection from a ``TensorArray`` (``unstack``) and
  writing outputs into a ``TensorArray``. Its autodiff gradient is the
  cheapest: slicing ``xw[t]`` in the loop instead makes the backward pass
  materialise a full ``(T, B, P)`` tensor at every step. Used where the cell
  has no hand-written gradient.
- ``"convertible"`` (inference, ``training`` not True; `scan_convertible`):
  ``tf.while_loop`` reading with ``tf.gather`` and writing blocks of outputs
  with ``tf.tensor_scatter_nd_update`` into a preallocated tensor.
  TensorArray ops have no TFLite builtin form when the batch or length is
  dynamic, and tf2onnx cannot map them either; these become the builtins
  WHILE, GATHER and SCATTER_ND (ONNX ``Loop``, ``Gather``, ``ScatterND``), so
  ``model.export(format="litert"|"onnx")`` and the TFLite converter need no
  Flex delegate and no special mode.
- ``"unrolled"`` (``unroll=True``; `scan_unrolled`): a Python loop over a
  static length.
- ``"bptt"`` (training with a cell that supplies its derivative): not here,
  see `keras_seq.layers._bptt.run_bptt_recurrence`.

Masking follows ``keras.src.backend.tensorflow.rnn.rnn``: at a masked step the
states are carried through unchanged and the output is the previous output (or
zeros with ``zero_output_for_mask``, which ``keras.layers.Bidirectional`` sets).
`mask_step` writes that rule once for every forward loop; `mask_step_backward`
is its derivative, for the hand-written backward loop.

The measurements behind these choices are in ``benchmarks/RESULTS.md``
("Recurrent family").
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence

import tensorflow as tf

StepFn = Callable[[tf.Tensor, list], tuple]
# body(xs_t, carry) -> (outputs_t, carry), all lists.
BodyFn = Callable[[list, list], tuple]


def choose_loop(training, unroll: bool = False, bptt: bool = False) -> str:
    """The loop form of one call: the one place that weighs the call's options.

    Args:
        training: the call's ``training`` argument; only ``True`` trains.
        unroll: a Python loop over the static length (``unroll=True``).
        bptt: the cell supplies a hand-written gradient for this
            configuration (``cell.bptt_supported()``).

    Returns:
        ``"unrolled"`` with ``unroll``; when training, ``"bptt"`` if the
        cell supports it, else ``"tensor_array"`` (the cheapest autodiff
        gradient); otherwise ``"convertible"`` (the form Keras' exporters turn
        into TFLite builtins and ONNX).
    """
    if unroll:
        return "unrolled"
    if training is True:
        return "bptt" if bptt else "tensor_array"
    return "convertible"


def project(x: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor | None = None) -> tf.Tensor:
    """``x @ kernel + bias`` over the last axis of a rank-2 or rank-3 ``x``.

    One 2-D matmul with ``bias_add``: TensorFlow fuses the pair into a single
    kernel and its bias gradient is one reduction. A rank-3 ``tf.matmul``
    would broadcast the kernel instead, and its kernel gradient builds and
    reduces a ``(T, in, P)`` tensor (slower to train; see
    benchmarks/RESULTS.md).
    """
    features = tf.shape(x)[-1]
    y = tf.matmul(tf.reshape(x, [-1, features]), kernel)
    if bias is not None:
        y = tf.nn.bias_add(y, bias)
    if len(x.shape) == 2:
        return y
    return tf.reshape(y, tf.concat([tf.shape(x)[:-1], tf.shape(kernel)[-1:]], 0))


def recurrent_matmul(h: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """``h @ kernel + bias`` for one step, in the form `step_matmul_form` chose.

    ``"fused"``: MatMul followed by BiasAdd, which TensorFlow's graph optimiser
    fuses into one ``_FusedMatMul`` (a oneDNN kernel on x86; an LSTM step's
    ``xw_t + ...`` joins it as a fused Add). ``"plain"``: a plain MatMul and an
    Add. Which is faster depends on the CPU, by a factor of 3 to 4 either way
    at batch 1 (see `step_matmul_form`). Under XLA both compile alike.
    """
    return _matmul_plus_bias(h, kernel, bias, step_matmul_form())


def _matmul_plus_bias(h, kernel, bias, form):
    if form == "fused":
        return tf.nn.bias_add(tf.matmul(h, kernel), bias)
    return tf.matmul(h, kernel) + bias


# The environment variable that fixes `step_matmul_form` ("fused" or "plain").
STEP_MATMUL_ENV = "KERAS_SEQ_STEP_MATMUL"
_STEP_MATMUL_FORMS = ("fused", "plain")
_step_matmul = None  # the process's choice, made once
_step_matmul_lock = threading.Lock()


def step_matmul_form() -> str:
    """``"fused"`` or ``"plain"``: how `recurrent_matmul` computes a step's matmul.

    A step's ``h @ U`` is small (``(B, units) @ (units, gates * units)``), so
    the fixed cost of the kernel that runs it matters as much as its
    arithmetic, and TensorFlow's CPU kernels behave differently by machine: in
    the same batch-1 loop, oneDNN's fused MatMul+BiasAdd(+Add) took a third of
    the time of a plain MatMul on one 2-core machine and four times as long on
    another (benchmarks/RESULTS.md, "The step's matmul"). So the first trace of
    a recurrent step in a process times both forms in the inference loop
    (`scan_convertible`, batch 1, an LSTM-sized step, eagerly, on the CPU) and keeps the faster. ``KERAS_SEQ_STEP_MATMUL=fused`` or
    ``plain`` skips the timing. With a GPU visible the fused form is used (one
    kernel launch instead of two), and so it is where nothing runs eagerly (a
    TF1-style graph). Both forms compute the same sums; they may differ in the
    last bit.
    """
    global _step_matmul
    with _step_matmul_lock:
        if _step_matmul is None:
            _step_matmul = _choose_step_matmul()
        return _step_matmul


def _choose_step_matmul() -> str:
    forced = os.environ.get(STEP_MATMUL_ENV, "").strip().lower()
    if forced:
        if forced not in _STEP_MATMUL_FORMS:
            raise ValueError(
                f"Environment variable {STEP_MATMUL_ENV}: expected one of "
                f"{_STEP_MATMUL_FORMS} (or unset), received "
                f"{os.environ[STEP_MATMUL_ENV]!r}."
            )
        return forced
    if tf.config.list_physical_devices("GPU"):
        return "fused"
    with tf.init_scope():
        if not tf.executing_eagerly():
            return "fused"
        with tf.device("/CPU:0"):
            return _faster_step_matmul()


def _faster_step_matmul(units: int = 256, gates: int = 4, steps: int = 32,
                        repeats: int = 5) -> str:
    """Times both forms of a batch-1 LSTM-like step in the inference loop
    (interleaved; the fastest of ``repeats`` calls each, the least disturbed
    by other processes)."""
    width = gates * units
    # Arguments rather than captured constants, as a layer's weights are: oneDNN
    # treats a constant kernel differently. (No tf.Variable: this may run
    # while a tf.function is being traced, which forbids creating variables.)
    kernel = tf.random.stateless_normal([units, width], [1, 2]) * 0.05
    bias = tf.zeros([width])
    xw = tf.random.stateless_normal([steps, 1, width], [3, 4])
    h0 = tf.zeros([1, units])

    def loop(form):
        @tf.function
        def run(xw, h0, kernel, bias):
            def body(xs_t, carry):
                z = xs_t[0] + _matmul_plus_bias(carry[0], kernel, bias, form)
                h = tf.tanh(z[:, :units])
                return [h], [h]

            return scan_convertible(body, [xw], [h0], [h0], collect=False)[1][0]

        return run

    loops = {form: loop(form) for form in _STEP_MATMUL_FORMS}
    for run in loops.values():
        run(xw, h0, kernel, bias).numpy()  # trace and warm up
    best = dict.fromkeys(loops, float("inf"))
    for _ in range(repeats):
        for form, run in loops.items():
            start = time.perf_counter()
            run(xw, h0, kernel, bias).numpy()
            best[form] = min(best[form], time.perf_counter() - start)
    return min(best, key=best.get)


def mask_step(mask_t, output, new_states, states, prev_output, zero_output=None):
    """Keras' masking rule for one step, for every forward loop.

    Where ``mask_t`` is False the states stay ``states`` and the output is
    ``prev_output``, or ``zero_output`` when given (``zero_output_for_mask``;
    made once, before the loop).

    Args:
        mask_t: ``(B, 1)`` bool, True = the step counts.
        output: ``(B, units)`` the step's output.
        new_states: the step's new states.
        states: the states before the step.
        prev_output: the output carried from the previous step.
        zero_output: zeros like ``output``, or None.

    Returns:
        ``(output, new_states)`` after masking.
    """
    new_states = [tf.where(mask_t, n, s) for n, s in zip(new_states, states)]
    previous = prev_output if zero_output is None else zero_output
    return tf.where(mask_t, output, previous), new_states


def mask_step_backward(mask_t, d_new_states, d_output, zero_output_for_mask: bool):
    """The derivative of `mask_step`, for the hand-written backward loop.

    The step's output is its first new state (h), so the gradient reaching
    the masked output goes to ``h`` where the step counts and to the carried
    previous output where it does not; a masked step passes the state
    gradients straight through to the previous states.

    Args:
        mask_t: ``(B, 1)`` bool, as in `mask_step`.
        d_new_states: gradients of the masked new states.
        d_output: gradient of the masked output.
        zero_output_for_mask: as in `mask_step` (``zero_output`` given).

    Returns:
        ``(d_step_states, d_through, d_prev_output)``: the gradients of the
        step's own new states, the part that goes straight to the previous
        states, and the gradient of the previous output.
    """
    zeros = tf.zeros_like(d_output)
    d_through = [tf.where(mask_t, zeros, d) for d in d_new_states]
    d_step = [tf.where(mask_t, d, zeros) for d in d_new_states]
    d_step[0] = d_step[0] + tf.where(mask_t, d_output, zeros)
    d_prev_output = zeros if zero_output_for_mask else tf.where(mask_t, zeros, d_output)
    return d_step, d_through, d_prev_output


def run_recurrence(
    step: StepFn,
    xw: tf.Tensor,
    initial_states: Sequence[tf.Tensor],
    mask: tf.Tensor | None = None,
    go_backwards: bool = False,
    loop: str = "convertible",
    return_sequences: bool = False,
    zero_output_for_mask: bool = False,
    initial_output: tf.Tensor | None = None,
    steps_per_iteration: int | None = None,
) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
    """Runs ``step`` over the time axis of the hoisted input projection.

    Args:
        step: ``step(xw_t, states) -> (output, new_states)`` with ``xw_t`` of
            shape ``(B, P)`` and ``states`` a list; the output is the first
            new state (h) unless ``initial_output`` is given.
        xw: ``(T, B, P)`` input projection for every step, time-major.
        initial_states: list of ``(B, units)`` tensors.
        mask: optional ``(B, T)`` mask, ``True`` = keep.
        go_backwards: process the sequence in reverse; outputs are returned in
            processing order, as Keras does.
        loop: ``"tensor_array"``, ``"convertible"`` or ``"unrolled"``, as
            `choose_loop` returns it.
        return_sequences: collect the output of every step.
        zero_output_for_mask: masked steps output zeros instead of the
            previous output.
        initial_output: for a step whose output is not its first new state
            (e.g. `NTMCell`'s projection): zeros of the output's shape
            ``(B, output_size)``. The loop then carries the previous output
            (one more loop variable), with or without a mask.
        steps_per_iteration: steps per loop iteration (`scan`; default
            `STEPS_PER_ITERATION`).

    Returns:
        ``(last_output, outputs, final_states)``: ``outputs`` is ``(B, T, units)``
        with ``return_sequences``, else ``last_output[:, None]``.
    """
    xw, mask = processing_order(xw, mask, go_backwards)

    # The loop carries the states and, with a mask or a separate output, the
    # previous output (otherwise the output of a step is its first state, h).
    carry = list(initial_states)
    zero_output = None
    carries_output = mask is not None or initial_output is not None
    if carries_output:
        zero_output = tf.zeros_like(carry[0]) if initial_output is None else initial_output
        carry = [zero_output, *carry]

    def body(xs_t, carry):
        if not carries_output:
            output, new_states = step(xs_t[0], carry)
            return [output], list(new_states)
        prev_output, states = carry[0], carry[1:]
        output, new_states = step(xs_t[0], states)
        if mask is not None:
            output, new_states = mask_step(
                xs_t[1], output, new_states, states, prev_output,
                zero_output if zero_output_for_mask else None,
            )
        return [output], [output, *new_states]

    sequences = [xw] if mask is None else [xw, mask]
    outputs, carry = scan(loop, body, sequences, carry, [carry[0]], return_sequences,
                          steps_per_iteration)
    last_output = carry[0]
    states = carry[1:] if carries_output else carry
    outputs = outputs[0] if return_sequences else last_output[:, None]
    return last_output, outputs, states


def processing_order(xw, mask, go_backwards):
    """The projection and a ``(T, B, 1)`` bool mask, both in processing order."""
    if mask is not None:
        # expand_dims, not [..., None]: a bool strided slice is not a TFLite builtin.
        mask = tf.expand_dims(tf.transpose(tf.cast(mask, tf.bool)), -1)
    if go_backwards:
        xw = tf.reverse(xw, [0])
        if mask is not None:
            mask = tf.reverse(mask, [0])
    return xw, mask


def num_steps(xw):
    """The length of a time-major tensor: static when known."""
    return xw.shape[0] if xw.shape[0] is not None else tf.shape(xw)[0]


def scan(loop: str, body: BodyFn, sequences, carry, templates, collect: bool = True,
         steps_per_iteration: int | None = None):
    """Runs ``body`` over time in the form ``loop`` (`scan_unrolled`,
    `scan_tensor_array` or `scan_convertible`; same arguments and results).

    ``steps_per_iteration`` sets how many steps the TensorArray and
    convertible forms run per loop iteration (default `STEPS_PER_ITERATION`).
    """
    if loop == "unrolled":
        return scan_unrolled(body, sequences, carry, collect)
    if loop == "tensor_array":
        return scan_tensor_array(body, sequences, carry, templates, collect,
                                 steps_per_iteration or STEPS_PER_ITERATION)
    if loop == "convertible":
        return scan_convertible(body, sequences, carry, templates, collect,
                                steps_per_iteration or STEPS_PER_ITERATION)
    raise ValueError(f"scan: unknown loop {loop!r}; expected 'unrolled', 'tensor_array' "
                     "or 'convertible' ('bptt' is run_bptt_recurrence).")


def scan_unrolled(body: BodyFn, sequences, carry, collect: bool = True):
    """A Python loop over the static length of ``sequences`` (see `scan_convertible`)."""
    steps = sequences[0].shape[0]
    if steps is None:
        raise ValueError("unroll=True needs a static number of time steps.")
    collected = []
    for t in range(steps):
        outputs_t, carry = body([x[t] for x in sequences], carry)
        collected.append(outputs_t)
    if not collect:
        return None, carry
    return [tf.stack(list(o), axis=1) for o in zip(*collected)], carry


# Steps per iteration of the TensorArray and convertible loops. A while-loop
# iteration costs a few control-flow ops per loop variable besides the step
# itself; at batch 1 that overhead is a large part of a step, and more steps
# per iteration pay it less often. The price is a bigger graph that takes
# longer to trace. Eight was the best trade-off measured (benchmarks/RESULTS.md,
# "Inference since run 5").
STEPS_PER_ITERATION = 8


def scan_tensor_array(body: BodyFn, sequences, carry, templates, collect: bool = True,
                      steps_per_iteration: int = STEPS_PER_ITERATION):
    """A ``tf.while_loop`` over time through TensorArrays: the training form.

    Same arguments and results as `scan_convertible`; ``steps_per_iteration``
    steps run per iteration (the last ``T mod k`` one per iteration).
    """
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

    def one_step(t, out_tas, carry):
        outputs_t, carry = body([ta.read(t) for ta in input_tas], carry)
        if collect:
            out_tas = [ta.write(t, o) for ta, o in zip(out_tas, outputs_t)]
        return out_tas, carry

    def run(first, last, per_iteration, out_tas, carry):
        """Steps ``first .. last - 1``, ``per_iteration`` of them per iteration."""
        if isinstance(first, int) and isinstance(last, int) and last <= first:
            # No loop at all: XLA cannot differentiate a loop of zero iterations.
            return out_tas, carry

        def loop_body(t, out_tas, *carry):
            carry = list(carry)
            for i in range(per_iteration):
                out_tas, carry = one_step(t + i, out_tas, carry)
            return (t + per_iteration, out_tas, *carry)

        result = tf.while_loop(
            lambda t, *_: t < last,
            loop_body,
            (tf.convert_to_tensor(first), out_tas, *carry),
            maximum_iterations=(last - first) // per_iteration,
            parallel_iterations=32,
        )
        return list(result[1]), list(result[2:])

    k = steps_per_iteration
    blocks = steps // k * k
    out_tas, carry = run(0, blocks, k, out_tas, carry)
    if k > 1:
        out_tas, carry = run(blocks, steps, 1, out_tas, carry)  # the last steps % k steps
    if not collect:
        return None, carry
    # (T, B, ...) -> batch-major (B, T, ...)
    return [_batch_major(ta.stack(), len(t.shape) + 1) for ta, t in zip(out_tas, templates)], carry


def _batch_major(x, rank):
    return tf.transpose(x, [1, 0, *range(2, rank)])


def scan_convertible(body: BodyFn, sequences, carry, templates, collect: bool = True,
                     steps_per_iteration: int = STEPS_PER_ITERATION):
    """A ``tf.while_loop`` over time in ops that TFLite and ONNX convert natively.

    The inference form. It reads step ``t`` of each ``(T, ...)`` sequence with
    ``tf.gather`` and writes the per-step outputs into preallocated
    ``(T, ...)`` tensors with ``tf.tensor_scatter_nd_update`` (builtins
    GATHER and SCATTER_ND in TFLite, ``Gather``/``ScatterND`` in ONNX), with a
    dynamic batch and length. TensorArrays would be cheaper in TensorFlow but
    have no TFLite builtin form unless every dimension but time is static.

    TensorFlow copies the whole output tensor at every scatter, so
    ``steps_per_iteration`` steps (k, default `STEPS_PER_ITERATION`) run
    per loop iteration and their outputs
    are written as one block: a ``T``-step loop makes ``T / k`` copies
    instead of ``T`` (and pays the loop's control-flow overhead ``T / k``
    times). The last ``T mod k`` steps run one per iteration. (Sixteen steps
    per iteration, with the last steps written into a small buffer, made
    TensorFlow at batch 64 a little faster but the converted TFLite model
    much slower at batch 1; see benchmarks/RESULTS.md.)

    Args:
        body: ``body(xs_t, carry) -> (outputs_t, carry)`` with ``xs_t`` the
            list of step-``t`` slices of ``sequences``, and lists for the rest.
        sequences: list of time-major ``(T, B, ...)`` tensors, same ``T``.
        carry: list of tensors carried between steps.
        templates: one ``(B, ...)`` tensor per output with the shape and
            dtype of that output at one step (only shape and dtype are used).
        collect: stack the outputs over time; else only the carry is returned.
        steps_per_iteration: steps per loop iteration (see above).

    Returns:
        ``(outputs, carry)``: ``outputs`` is a list of batch-major ``(B, T, ...)``
        tensors (``None`` when not collecting).
    """
    steps = num_steps(sequences[0])
    batch = tf.shape(templates[0])[0] if templates else None
    # Batch-major buffers (B, T, ...), written at [b, t] index pairs: with an
    # empty batch the indices are empty too (a scatter of non-empty indices
    # into an empty tensor is an error), and no transpose is needed after.
    # An output with a zero-sized feature axis (e.g. attention weights of a
    # decoder without attention) stays all zeros: scattering non-empty indices
    # into an empty tensor is an error.
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

    k = steps_per_iteration
    blocks = steps // k * k
    buffers, carry = run(0, blocks, k, buffers, carry)
    if k > 1:
        buffers, carry = run(blocks, steps, 1, buffers, carry)
    return (buffers if collect else None), carry
