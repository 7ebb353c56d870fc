"""The one sequence driver shared by every recurrent layer.

A recurrent layer hands the driver the input projection ``x @ W`` for all time
steps at once (one large matmul outside the loop; the bias is added there or
by the step after ``h @ U``, see `recurrent_matmul`) and a ``step`` function
that does only the recurrent part. The driver runs ``step`` over time in one of
three forms that compute the same thing:

- TensorArray form (training): ``tf.while_loop`` reading the per-step
  projection from a ``TensorArray`` (``unstack``) and writing outputs into a
  ``TensorArray``. Its autodiff gradient is the cheapest: slicing ``xw[t]``
  in the loop instead makes the backward pass materialise a full
  ``(T, B, P)`` tensor at every step. Used where the cell has no
  hand-written gradient.
- convertible form (inference, ``training`` not True; `scan_convertible`):
  ``tf.while_loop`` reading with ``tf.gather`` and writing blocks of outputs
  with ``tf.tensor_scatter_nd_update`` into a preallocated tensor.
  TensorArray ops have no TFLite builtin form when the batch or length is
  dynamic, and tf2onnx cannot map them either; these become the builtins
  WHILE, GATHER and SCATTER_ND (ONNX ``Loop``, ``Gather``, ``ScatterND``), so
  ``model.export(format="litert"|"onnx")`` and the TFLite converter need no
  Flex delegate and no special mode.
- unrolled form (``unroll=True``): a Python loop over a static length.

``run_fused_recurrence`` is the training form, with a hand-written gradient
(backpropagation through time) for cells that supply their derivative: the
forward loop keeps what the backward loop needs, the backward loop does one
matmul per step (``dr_t @ Uᵀ``), and the recurrent kernel's gradient is one
large matmul over all steps after the loop instead of one small matmul and an
accumulation per step. Both loops are compiled with XLA, which fuses a step's
elementwise work. Layers use it when training.

Masking follows ``keras.src.backend.tensorflow.rnn.rnn``: at a masked step the
states are carried through unchanged and the output is the previous output (or
zeros with ``zero_output_for_mask``, which ``keras.layers.Bidirectional`` sets).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import tensorflow as tf

StepFn = Callable[[tf.Tensor, list], tuple]


class FusedCell(Protocol):
    """A cell's step and its derivative, for `run_fused_recurrence`.

    ``r_t = h_in @ U`` is computed by the driver (``h_in`` is the previous
    output times the recurrent dropout mask); ``params`` are the cell's other
    recurrent weights (peepholes, recurrent bias) as tensors.
    """

    _fused_saved_widths: Sequence[int]  # width of each tensor saved per step
    _fused_d_r_is_d_xw: bool  # the gradients of xw_t and r_t are the same tensor

    def _fused_forward(self, xw_t, r_t, states, params) -> tuple[list, list]:
        """``(new_states, saved)``: h must be ``new_states[0]``; ``saved`` is
        what ``_fused_backward`` needs from this step (a fixed-length list)."""

    def _fused_backward(self, saved, states_prev, states, d_states, params) -> tuple:
        """``(d_xw_t, d_r_t, d_states_prev, d_params_t)`` from the gradients of
        the step's new states ``d_states``; ``d_r_t`` may be ``d_xw_t``
        itself, an entry of ``d_states_prev`` may be ``None`` (no direct
        path); ``d_params_t`` are this step's per-example ``(B, ...)``
        contributions to the gradients of ``params`` (the driver sums them
        over steps and the batch)."""


def project(x: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor | None = None) -> tf.Tensor:
    """``x @ kernel + bias`` over the last axis of a rank-2 or rank-3 ``x``.

    One 2-D matmul with ``bias_add``: TensorFlow fuses the pair into a single
    kernel and its bias gradient is one reduction. A rank-3 ``tf.matmul``
    would broadcast the kernel instead, and its kernel gradient builds and
    reduces a ``(T, in, P)`` tensor (training was ~30% slower that way).
    """
    features = tf.shape(x)[-1]
    y = tf.matmul(tf.reshape(x, [-1, features]), kernel)
    if bias is not None:
        y = tf.nn.bias_add(y, bias)
    if len(x.shape) == 2:
        return y
    return tf.reshape(y, tf.concat([tf.shape(x)[:-1], tf.shape(kernel)[-1:]], 0))


def recurrent_matmul(h: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """``h @ kernel + bias`` for one step, as MatMul followed by BiasAdd.

    TensorFlow's graph optimiser fuses the pair into one ``_FusedMatMul``
    (oneDNN on x86). At batch 1 that kernel is about three times faster than a
    plain ``MatMul`` (a matrix-vector product through Eigen's thread pool), so
    a cell without a bias passes zeros rather than skipping the add.
    """
    return tf.nn.bias_add(tf.matmul(h, kernel), bias)


def run_recurrence(
    step: StepFn,
    xw: tf.Tensor,
    initial_states: Sequence[tf.Tensor],
    mask: tf.Tensor | None = None,
    go_backwards: bool = False,
    unroll: bool = False,
    return_sequences: bool = False,
    zero_output_for_mask: bool = False,
    training: bool = False,
) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
    """Runs ``step`` over the time axis of the hoisted input projection.

    Args:
        step: ``step(xw_t, states) -> (output, new_states)`` with ``xw_t`` of
            shape ``(B, P)`` and ``states`` a list; the output must be the
            first new state (h, for every cell of this package).
        xw: ``(T, B, P)`` input projection for every step, time-major.
        initial_states: list of ``(B, units)`` tensors.
        mask: optional ``(B, T)`` mask, ``True`` = keep.
        go_backwards: process the sequence in reverse; outputs are returned in
            processing order, as Keras does.
        unroll: Python loop over the static length instead of a while loop.
        return_sequences: collect the output of every step.
        zero_output_for_mask: masked steps output zeros instead of the
            previous output.
        training: run the TensorArray form, whose autodiff gradient is the
            cheapest; otherwise the convertible form (`scan_convertible`),
            which Keras' own exporters turn into TFLite builtins and ONNX.

    Returns:
        ``(last_output, outputs, final_states)``: ``outputs`` is ``(B, T, units)``
        with ``return_sequences``, else ``last_output[:, None]``.
    """
    xw, mask = _processing_order(xw, mask, go_backwards)

    # The loop carries the states and, with a mask only, the previous output
    # (without a mask the output of a step is its first state, h).
    carry = list(initial_states)
    if mask is not None:
        zero_output = tf.zeros_like(carry[0])
        carry = [zero_output, *carry]

    def advance(xw_t, mask_t, carry):
        if mask_t is None:
            output, new_states = step(xw_t, carry)
            return output, list(new_states)
        prev_output, states = carry[0], carry[1:]
        output, new_states = step(xw_t, states)
        new_states = [tf.where(mask_t, n, s) for n, s in zip(new_states, states)]
        output = tf.where(mask_t, output, zero_output if zero_output_for_mask else prev_output)
        return output, [output, *new_states]

    if unroll:
        run = _unrolled
    elif training:
        run = _tensor_array_loop
    else:
        run = _convertible_loop
    outputs, carry = run(advance, xw, mask, carry, return_sequences)
    last_output = carry[0]
    states = carry[1:] if mask is not None else carry
    if not return_sequences:
        outputs = last_output[:, None]
    return last_output, outputs, states


def _processing_order(xw, mask, go_backwards):
    """The projection and a ``(T, B, 1)`` bool mask, both in processing order."""
    if mask is not None:
        # expand_dims, not [..., None]: a bool strided slice is not a TFLite builtin.
        mask = tf.expand_dims(tf.transpose(tf.cast(mask, tf.bool)), -1)
    if go_backwards:
        xw = tf.reverse(xw, [0])
        if mask is not None:
            mask = tf.reverse(mask, [0])
    return xw, mask


def _unrolled(advance, xw, mask, carry, return_sequences):
    steps = xw.shape[0]
    if steps is None:
        raise ValueError("unroll=True needs a static number of time steps.")
    outputs = []
    for t in range(steps):
        output, carry = advance(xw[t], None if mask is None else mask[t], carry)
        outputs.append(output)
    return (tf.stack(outputs, axis=1) if return_sequences else None), carry


def _num_steps(xw):
    return xw.shape[0] if xw.shape[0] is not None else tf.shape(xw)[0]


# Steps per iteration of the TensorArray loop. A while-loop iteration costs a
# few control-flow ops per loop variable besides the step itself; at batch 1
# that overhead is a large part of a step. GRU inference at batch 1, ours /
# Keras in one process: 0.75 with one step per iteration, 0.63-0.69 with four,
# 0.64 with eight (against 0.69 with four in the same run). More steps per
# iteration make a bigger graph: tracing a PeepholeLSTM with its gradient
# took 0.8 s with one, 1.4 s with four and 2.3 s with eight.
_STEPS_PER_ITERATION = 8


def _tensor_array_loop(advance, xw, mask, carry, return_sequences):
    steps = _num_steps(xw)
    xw_ta = tf.TensorArray(xw.dtype, size=steps, element_shape=xw.shape[1:]).unstack(xw)
    mask_ta = None
    if mask is not None:
        mask_ta = tf.TensorArray(tf.bool, size=steps, element_shape=mask.shape[1:]).unstack(mask)
    # An empty TensorArray keeps the loop signature the same when not collecting.
    out_ta = tf.TensorArray(
        carry[0].dtype, size=steps if return_sequences else 0, element_shape=carry[0].shape
    )

    def one_step(t, out_ta, carry):
        mask_t = None if mask_ta is None else mask_ta.read(t)
        output, carry = advance(xw_ta.read(t), mask_t, carry)
        if return_sequences:
            out_ta = out_ta.write(t, output)
        return out_ta, carry

    def run(first, last, per_iteration, out_ta, carry):
        """Steps ``first .. last - 1``, ``per_iteration`` of them per iteration."""
        if isinstance(first, int) and isinstance(last, int) and last <= first:
            # No loop at all: XLA cannot differentiate a loop of zero iterations.
            return out_ta, carry

        def body(t, out_ta, *carry):
            carry = list(carry)
            for i in range(per_iteration):
                out_ta, carry = one_step(t + i, out_ta, carry)
            return (t + per_iteration, out_ta, *carry)

        result = tf.while_loop(
            lambda t, *_: t < last,
            body,
            (tf.convert_to_tensor(first), out_ta, *carry),
            maximum_iterations=(last - first) // per_iteration,
            parallel_iterations=32,
        )
        return result[1], list(result[2:])

    k = _STEPS_PER_ITERATION
    blocks = steps // k * k
    out_ta, carry = run(0, blocks, k, out_ta, carry)
    out_ta, carry = run(blocks, steps, 1, out_ta, carry)  # the last steps % k steps
    outputs = tf.transpose(out_ta.stack(), [1, 0, 2]) if return_sequences else None
    return outputs, carry  # outputs (B, T, units)


def scan_convertible(body, sequences, carry, templates, collect=True):
    """A ``tf.while_loop`` over time in ops that TFLite and ONNX convert natively.

    The inference form of the driver, also used by the seq2seq decoder. It
    reads step ``t`` of each ``(T, ...)`` sequence with ``tf.gather`` and
    writes the per-step outputs into preallocated ``(T, ...)`` tensors with
    ``tf.tensor_scatter_nd_update`` (builtins GATHER and SCATTER_ND in
    TFLite, ``Gather``/``ScatterND`` in ONNX), with a dynamic batch and
    length. TensorArrays would be cheaper in TensorFlow but have no TFLite
    builtin form unless every dimension but time is static.

    TensorFlow copies the whole output tensor at every scatter, so
    `_STEPS_PER_ITERATION` steps run per loop iteration and their outputs
    are written as one block: a ``T``-step loop makes ``T / k`` copies
    instead of ``T`` (and pays the loop's control-flow overhead ``T / k``
    times). The last ``T mod k`` steps run one per iteration. (Sixteen steps
    per iteration, with the last steps written into a small buffer, made
    TensorFlow at batch 64 about 5% faster but the converted TFLite model
    30-60% slower at batch 1; see benchmarks/RESULTS.md.)

    Args:
        body: ``body(xs_t, carry) -> (outputs_t, carry)`` with ``xs_t`` the
            list of step-``t`` slices of ``sequences``, and lists for the rest.
        sequences: list of time-major ``(T, B, ...)`` tensors, same ``T``.
        carry: list of tensors carried between steps.
        templates: one ``(B, ...)`` tensor per output with the shape and
            dtype of that output at one step (only shape and dtype are used).
        collect: stack the outputs over time; else only the carry is returned.

    Returns:
        ``(outputs, carry)``: ``outputs`` is a list of batch-major ``(B, T, ...)``
        tensors (``None`` when not collecting).
    """
    steps = _num_steps(sequences[0])
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

    k = _STEPS_PER_ITERATION
    blocks = steps // k * k
    buffers, carry = run(0, blocks, k, buffers, carry)
    buffers, carry = run(blocks, steps, 1, buffers, carry)
    return (buffers if collect else None), carry


def _convertible_loop(advance, xw, mask, carry, return_sequences):
    sequences = [xw] if mask is None else [xw, mask]

    def body(xs_t, carry):
        output, carry = advance(xs_t[0], xs_t[1] if mask is not None else None, carry)
        return [output], carry

    outputs, carry = scan_convertible(body, sequences, carry, [carry[0]], return_sequences)
    return (outputs[0] if return_sequences else None), carry


def run_fused_recurrence(
    cell: FusedCell,
    xw: tf.Tensor,
    initial_states: Sequence[tf.Tensor],
    kernel: tf.Tensor,
    params: Sequence[tf.Tensor],
    mask: tf.Tensor | None = None,
    recurrent_mask: tf.Tensor | None = None,
    go_backwards: bool = False,
    return_sequences: bool = False,
    zero_output_for_mask: bool = False,
) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
    """`run_recurrence` (training form) with the cell's hand-written gradient.

    The forward loop keeps the states before and after every step and what
    the cell saves, stacked over time; the backward loop reads them back,
    does one matmul per step and sums the per-step gradients of the cell's
    other weights. Both loops are compiled with XLA (see `_fused_loops`). The
    recurrent kernel's gradient is one ``(units, T·B) @ (T·B, P)`` matmul
    after the loop.

    Args:
        cell: supplies ``_fused_forward`` and ``_fused_backward`` (see
            `FusedCell`).
        xw: ``(T, B, P)`` input projection for every step, time-major.
        initial_states: list of ``(B, units)`` tensors, h first.
        kernel: ``(units, P)`` recurrent kernel U.
        params: the cell's other recurrent weights.
        mask, go_backwards, return_sequences, zero_output_for_mask: as in
            `run_recurrence`.
        recurrent_mask: optional ``(B, units)`` recurrent dropout mask that
            multiplies h before U.

    Returns:
        ``(last_output, outputs, final_states)`` as `run_recurrence`.
    """
    xw, mask = _processing_order(xw, mask, go_backwards)
    n_states = len(initial_states)
    forward_loop, backward_loop = _fused_loops(cell, return_sequences, zero_output_for_mask)

    @tf.custom_gradient
    def fused(xw, kernel, *args):
        states0, weights = list(args[:n_states]), list(args[n_states:])
        # The gradient is the backward loop below: keep tapes off the forward loop.
        inputs = tf.nest.map_structure(tf.stop_gradient, [xw, kernel, states0, weights])
        last_output, final_states, outputs, saved, history = forward_loop(
            *inputs, mask, recurrent_mask
        )

        def grad(*upstream):
            d_last, d_states = upstream[0], list(upstream[1 : 1 + n_states])
            d_outputs = upstream[1 + n_states] if return_sequences else None
            d_states = [tf.zeros_like(s) if d is None else d for s, d in zip(states0, d_states)]
            if d_last is None:
                d_last = tf.zeros_like(states0[0])
            d_xw, d_r, d_states0, d_params = backward_loop(
                xw, kernel, states0, weights, mask, recurrent_mask, saved, history,
                d_last, d_states, d_outputs,
            )
            # One (units, T·B) @ (T·B, P) matmul, outside the compiled loop: a
            # large matmul runs faster in TensorFlow's own kernel than in XLA's.
            h_in = history[0][:-1]
            if recurrent_mask is not None:
                h_in = h_in * recurrent_mask
            units, width = tf.shape(kernel)[0], tf.shape(kernel)[1]
            d_kernel = tf.matmul(
                tf.reshape(h_in, [-1, units]), tf.reshape(d_r, [-1, width]), transpose_a=True
            )
            return [d_xw, d_kernel, *d_states0, *d_params]

        results = [last_output, *final_states]
        if return_sequences:
            results.append(outputs)
        return results, grad

    results = fused(xw, kernel, *initial_states, *params)
    last_output, states = results[0], list(results[1 : 1 + n_states])
    if return_sequences:
        outputs = tf.transpose(results[1 + n_states], [1, 0, 2])  # (B, T, units)
    else:
        outputs = last_output[:, None]
    return last_output, outputs, states


def _fused_loops(cell, return_sequences, zero_output_for_mask):
    """The forward and backward loops of ``cell``, each compiled with XLA.

    Fusing the elementwise work of a step into a few kernels is what makes
    the hand-written gradient pay off on CPU: run op by op, a step's ~30
    small ops cost more than its matmul. XLA compiles once per input shape.
    """
    key = (return_sequences, zero_output_for_mask)
    # Kept on the cell (outside Keras' attribute tracking) so that eager calls
    # reuse the compiled loops; they go away with the cell.
    per_cell = cell.__dict__.get("_fused_loops_cache")
    if per_cell is None:
        per_cell = {}
        object.__setattr__(cell, "_fused_loops_cache", per_cell)
    if key not in per_cell:

        def forward_loop(*args):
            return _fused_forward_loop(
                cell, *args, zero_output_for_mask=zero_output_for_mask,
                return_sequences=return_sequences,
            )

        def backward_loop(*args):
            return _fused_backward_loop(cell, *args, zero_output_for_mask=zero_output_for_mask)

        per_cell[key] = (
            tf.function(forward_loop, jit_compile=True, autograph=False, reduce_retracing=True),
            tf.function(backward_loop, jit_compile=True, autograph=False, reduce_retracing=True),
        )
    return per_cell[key]


def _fused_forward_loop(cell, xw, kernel, states0, params, mask, recurrent_mask,
                        zero_output_for_mask, return_sequences):
    """Forward loop; also returns what the backward loop needs, stacked over time."""
    steps = _num_steps(xw)
    n_states = len(states0)
    batch = states0[0].shape[0]

    def array(shape, size=steps):
        return tf.TensorArray(xw.dtype, size=size, element_shape=shape)

    saved_tas = [array((batch, width)) for width in cell._fused_saved_widths]
    # states[t] are the states before step t; states[t + 1] those after it.
    state_tas = [array(s.shape, steps + 1).write(0, s) for s in states0]
    collect_outputs = mask is not None and return_sequences
    out_ta = array(states0[0].shape, steps if collect_outputs else 0)
    carry = list(states0)
    if mask is not None:
        zero_output = tf.zeros_like(states0[0])
        carry.append(zero_output)  # the previous output

    def body(t, saved_tas, state_tas, out_ta, *carry):
        states = list(carry[:n_states])
        h_in = states[0] if recurrent_mask is None else states[0] * recurrent_mask
        new_states, saved = cell._fused_forward(
            tf.gather(xw, t), tf.matmul(h_in, kernel), states, params
        )
        output = new_states[0]
        if mask is not None:
            mask_t = tf.gather(mask, t)
            new_states = [tf.where(mask_t, n, s) for n, s in zip(new_states, states)]
            previous = zero_output if zero_output_for_mask else carry[-1]
            output = tf.where(mask_t, output, previous)
            if collect_outputs:
                out_ta = out_ta.write(t, output)
        saved_tas = [ta.write(t, s) for ta, s in zip(saved_tas, saved)]
        state_tas = [ta.write(t + 1, s) for ta, s in zip(state_tas, new_states)]
        new_carry = list(new_states)
        if mask is not None:
            new_carry.append(output)
        return (t + 1, saved_tas, state_tas, out_ta, *new_carry)

    result = tf.while_loop(
        lambda t, *_: t < steps,
        body,
        (tf.constant(0), saved_tas, state_tas, out_ta, *carry),
        maximum_iterations=steps,
        parallel_iterations=32,
    )
    saved = [ta.stack() for ta in result[1]]
    history = [ta.stack() for ta in result[2]]  # (T + 1, B, units) each
    final = list(result[4:])
    final_states = final[:n_states]
    last_output = final[-1] if mask is not None else final_states[0]
    outputs = None
    if return_sequences:
        outputs = result[3].stack() if collect_outputs else history[0][1:]
    return last_output, final_states, outputs, saved, history


def _fused_backward_loop(cell, xw, kernel, states0, params, mask, recurrent_mask, saved,
                         history, d_last, d_states, d_outputs, zero_output_for_mask):
    """Backward loop: gradients of xw and r (stacked), the initial states and params."""
    steps = _num_steps(xw)
    n_states = len(states0)
    d_xw_ta = tf.TensorArray(xw.dtype, size=steps, element_shape=xw.shape[1:])
    d_r_ta = tf.TensorArray(
        xw.dtype, size=0 if cell._fused_d_r_is_d_xw else steps, element_shape=xw.shape[1:]
    )
    carry = list(d_states)
    if mask is None:
        carry[0] = carry[0] + d_last  # the last output is the final h
    else:
        carry.append(d_last)  # gradient of the carried previous output

    def body(t, d_xw_ta, d_r_ta, d_params, *carry):
        d_new = list(carry[:n_states])
        if mask is None:
            if d_outputs is not None:
                d_new[0] = d_new[0] + tf.gather(d_outputs, t)
            through = None
        else:
            mask_t = tf.gather(mask, t)
            d_output = carry[-1]
            if d_outputs is not None:
                d_output = d_output + tf.gather(d_outputs, t)
            zeros = tf.zeros_like(d_output)
            # Masked steps pass the state gradients straight to the previous step.
            through = [tf.where(mask_t, zeros, d) for d in d_new]
            d_new = [tf.where(mask_t, d, zeros) for d in d_new]
            d_new[0] = d_new[0] + tf.where(mask_t, d_output, zeros)
            d_prev_output = zeros if zero_output_for_mask else tf.where(mask_t, zeros, d_output)
        d_xw_t, d_r_t, d_prev, d_params_t = cell._fused_backward(
            [tf.gather(s, t) for s in saved],
            [tf.gather(h, t) for h in history],
            [tf.gather(h, t + 1) for h in history],
            d_new,
            params,
        )
        d_h_in = tf.matmul(d_r_t, kernel, transpose_b=True)
        if recurrent_mask is not None:
            d_h_in = d_h_in * recurrent_mask
        d_prev = list(d_prev)
        d_prev[0] = d_h_in if d_prev[0] is None else d_prev[0] + d_h_in
        if through is not None:
            d_prev = [d + p for d, p in zip(d_prev, through)]
            d_prev.append(d_prev_output)
        d_xw_ta = d_xw_ta.write(t, d_xw_t)
        if not cell._fused_d_r_is_d_xw:
            d_r_ta = d_r_ta.write(t, d_r_t)
        d_params = [a + g for a, g in zip(d_params, d_params_t)]
        return (t - 1, d_xw_ta, d_r_ta, d_params, *d_prev)

    # Per-example running sums of the other weights' gradients.
    batch_shape = tf.shape(states0[0])[:1]
    d_params0 = [tf.zeros(tf.concat([batch_shape, tf.shape(p)], 0), p.dtype) for p in params]
    result = tf.while_loop(
        lambda t, *_: t >= 0,
        body,
        (steps - 1, d_xw_ta, d_r_ta, d_params0, *carry),
        maximum_iterations=steps,
        parallel_iterations=32,
    )
    d_xw = result[1].stack()
    d_r = d_xw if cell._fused_d_r_is_d_xw else result[2].stack()
    d_params = [tf.reduce_sum(g, 0) for g in result[3]]
    d_states0 = list(result[4 : 4 + n_states])
    return d_xw, d_r, d_states0, d_params
