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

    Returns:
        ``(last_output, outputs, final_states)``: ``outputs`` is ``(B, T, units)``
        with ``return_sequences``, else ``last_output[:, None]``.
    """
    if mask is not None:
        # expand_dims, not [..., None]: a bool strided slice is not a TFLite builtin.
        mask = tf.expand_dims(tf.transpose(tf.cast(mask, tf.bool)), -1)  # (T, B, 1)
    if go_backwards:
        xw = tf.reverse(xw, [0])
        if mask is not None:
            mask = tf.reverse(mask, [0])

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
    elif builtin_loop_mode_enabled():
        run = _builtin_loop
    else:
        run = _tensor_array_loop
    outputs, carry = run(advance, xw, mask, carry, return_sequences)
    last_output = carry[0]
    states = carry[1:] if mask is not None else carry
    if return_sequences:
        outputs = tf.transpose(outputs, [1, 0, 2])  # (B, T, units)
    else:
        outputs = last_output[:, None]
    return last_output, outputs, states


def _unrolled(advance, xw, mask, carry, return_sequences):
    steps = xw.shape[0]
    if steps is None:
        raise ValueError("unroll=True needs a static number of time steps.")
    outputs = []
    for t in range(steps):
        output, carry = advance(xw[t], None if mask is None else mask[t], carry)
        outputs.append(output)
    return (tf.stack(outputs) if return_sequences else None), carry


def _num_steps(xw):
    return xw.shape[0] if xw.shape[0] is not None else tf.shape(xw)[0]


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

    def body(t, out_ta, *carry):
        mask_t = None if mask_ta is None else mask_ta.read(t)
        output, carry = advance(xw_ta.read(t), mask_t, list(carry))
        if return_sequences:
            out_ta = out_ta.write(t, output)
        return (t + 1, out_ta, *carry)

    result = tf.while_loop(
        lambda t, *_: t < steps,
        body,
        (tf.constant(0), out_ta, *carry),
        maximum_iterations=steps,
        parallel_iterations=32,
    )
    outputs = result[1].stack() if return_sequences else None
    return outputs, list(result[2:])


def _builtin_loop(advance, xw, mask, carry, return_sequences):
    steps = tf.shape(xw)[0]
    if return_sequences:
        outputs = tf.zeros(tf.concat([[steps], tf.shape(carry[0])], 0), carry[0].dtype)
    else:
        outputs = tf.zeros([0], carry[0].dtype)

    def body(t, outputs, *carry):
        mask_t = None if mask is None else tf.gather(mask, t)
        output, carry = advance(tf.gather(xw, t), mask_t, list(carry))
        if return_sequences:
            outputs = tf.tensor_scatter_nd_update(outputs, tf.reshape(t, [1, 1]), output[None])
        return (t + 1, outputs, *carry)

    result = tf.while_loop(
        lambda t, *_: t < steps,
        body,
        (tf.constant(0), outputs, *carry),
        maximum_iterations=steps,
    )
    outputs = result[1] if return_sequences else None
    return outputs, list(result[2:])
