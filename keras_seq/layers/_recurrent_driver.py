"""The one sequence driver shared by every recurrent layer.

A recurrent layer hands the driver the input projection ``x @ W + b`` for all
time steps at once (one large matmul outside the loop) and a ``step`` function
that does only the recurrent part. The driver runs ``step`` over time in one of
three forms that compute the same thing:

- training form (default): ``tf.while_loop`` reading the per-step projection
  from a ``TensorArray`` (``unstack``) and writing outputs into a
  ``TensorArray``. Its gradient is the cheapest: slicing ``xw[t]`` in the loop
  instead makes the backward pass materialise a full ``(T, B, P)`` tensor at
  every step.
- builtin form (inside ``builtin_loop_mode()``, used by the exporter):
  ``tf.while_loop`` reading with ``tf.gather`` and writing outputs with
  ``tf.tensor_scatter_nd_update`` into a preallocated tensor. TensorArray ops
  become Flex ops in TFLite when the batch or length is dynamic; these become
  the builtins WHILE, GATHER and SCATTER_ND.
- unrolled form (``unroll=True``): a Python loop over a static length.

Masking follows ``keras.src.backend.tensorflow.rnn.rnn``: at a masked step the
states are carried through unchanged and the output is the previous output (or
zeros with ``zero_output_for_mask``, which ``keras.layers.Bidirectional`` sets).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence

import tensorflow as tf

_state = threading.local()

StepFn = Callable[[tf.Tensor, list], tuple]


def builtin_loop_mode_enabled() -> bool:
    """True while tracing for export: loops must use TFLite builtin ops only."""
    return getattr(_state, "builtin_loops", False)


@contextlib.contextmanager
def builtin_loop_mode():
    """Trace recurrent loops in their TFLite-builtin form inside this block."""
    previous = builtin_loop_mode_enabled()
    _state.builtin_loops = True
    try:
        yield
    finally:
        _state.builtin_loops = previous


def run_recurrence(
    step: StepFn,
    xw: tf.Tensor,
    initial_states: Sequence[tf.Tensor],
    mask: tf.Tensor | None = None,
    go_backwards: bool = False,
    unroll: bool = False,
    return_sequences: bool = False,
    zero_output_for_mask: bool = False,
) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
    """Runs ``step`` over the time axis of the hoisted input projection.

    Args:
        step: ``step(xw_t, states) -> (output, new_states)`` with ``xw_t`` of
            shape ``(B, P)`` and ``states`` a list; the output has the shape of
            the first state.
        xw: ``(B, T, P)`` input projection for every step.
        initial_states: list of ``(B, units)`` tensors.
        mask: optional ``(B, T)`` mask, ``True`` = keep.
        go_backwards: process the sequence in reverse; outputs are returned in
            processing order, as Keras does.
        unroll: Python loop over the static length instead of a while loop.
        return_sequences: collect the output of every step.
        zero_output_for_mask: masked steps output zeros instead of the
            previous output.

    Returns:
        ``(last_output, outputs, final_states)``: ``outputs`` is ``(B, T, units)``
        with ``return_sequences``, else ``last_output[:, None]``.
    """
    states = list(initial_states)
    xw = tf.transpose(xw, [1, 0, 2])  # (T, B, P)
    if mask is not None:
        # expand_dims, not [..., None]: a bool strided slice is not a TFLite builtin.
        mask = tf.expand_dims(tf.transpose(tf.cast(mask, tf.bool)), -1)  # (T, B, 1)
    if go_backwards:
        xw = tf.reverse(xw, [0])
        if mask is not None:
            mask = tf.reverse(mask, [0])
    zero_output = tf.zeros_like(states[0])

    def masked_step(xw_t, mask_t, prev_output, states):
        output, new_states = step(xw_t, states)
        if mask_t is not None:
            new_states = [tf.where(mask_t, n, s) for n, s in zip(new_states, states)]
            output = tf.where(mask_t, output, zero_output if zero_output_for_mask else prev_output)
        return output, list(new_states)

    if unroll:
        run = _unrolled
    elif builtin_loop_mode_enabled():
        run = _builtin_loop
    else:
        run = _tensor_array_loop
    last_output, outputs, states = run(
        masked_step, xw, mask, zero_output, states, return_sequences
    )
    if return_sequences:
        outputs = tf.transpose(outputs, [1, 0, 2])  # (B, T, units)
    else:
        outputs = last_output[:, None]
    return last_output, outputs, states


def _unrolled(masked_step, xw, mask, output, states, return_sequences):
    steps = xw.shape[0]
    if steps is None:
        raise ValueError("unroll=True needs a static number of time steps.")
    outputs = []
    for t in range(steps):
        mask_t = None if mask is None else mask[t]
        output, states = masked_step(xw[t], mask_t, output, states)
        outputs.append(output)
    return output, (tf.stack(outputs) if return_sequences else None), states


def _num_steps(xw):
    return xw.shape[0] if xw.shape[0] is not None else tf.shape(xw)[0]


def _tensor_array_loop(masked_step, xw, mask, output, states, return_sequences):
    steps = _num_steps(xw)
    xw_ta = tf.TensorArray(xw.dtype, size=steps, element_shape=xw.shape[1:]).unstack(xw)
    mask_ta = None
    if mask is not None:
        mask_ta = tf.TensorArray(tf.bool, size=steps, element_shape=mask.shape[1:]).unstack(mask)
    # An empty TensorArray keeps the loop signature the same when not collecting.
    out_ta = tf.TensorArray(
        output.dtype, size=steps if return_sequences else 0, element_shape=output.shape
    )

    def body(t, out_ta, output, *states):
        mask_t = None if mask_ta is None else mask_ta.read(t)
        output, new_states = masked_step(xw_ta.read(t), mask_t, output, list(states))
        if return_sequences:
            out_ta = out_ta.write(t, output)
        return (t + 1, out_ta, output, *new_states)

    result = tf.while_loop(
        lambda t, *_: t < steps,
        body,
        (tf.constant(0), out_ta, output, *states),
        maximum_iterations=steps,
        parallel_iterations=32,
        swap_memory=True,
    )
    outputs = result[1].stack() if return_sequences else None
    return result[2], outputs, list(result[3:])


def _builtin_loop(masked_step, xw, mask, output, states, return_sequences):
    steps = tf.shape(xw)[0]
    if return_sequences:
        outputs = tf.zeros(tf.concat([[steps], tf.shape(output)], 0), output.dtype)
    else:
        outputs = tf.zeros([0], output.dtype)

    def body(t, outputs, output, *states):
        mask_t = None if mask is None else tf.gather(mask, t)
        output, new_states = masked_step(tf.gather(xw, t), mask_t, output, list(states))
        if return_sequences:
            outputs = tf.tensor_scatter_nd_update(outputs, tf.reshape(t, [1, 1]), output[None])
        return (t + 1, outputs, output, *new_states)

    result = tf.while_loop(
        lambda t, *_: t < steps,
        body,
        (tf.constant(0), outputs, output, *states),
        maximum_iterations=steps,
    )
    outputs = result[1] if return_sequences else None
    return result[2], outputs, list(result[3:])
