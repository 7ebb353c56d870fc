"""Training with a hand-written gradient: backpropagation through time (BPTT) under XLA.

A cell whose ``manual_gradient()`` returns a
`keras_seq.layers.recurrent.manual_gradient.ManualGradient` (its step and
that step's derivative, beside the cell in its file) trains on TensorFlow
with `run_bptt_recurrence` instead of autodiff of the loop: the forward loop
keeps what the backward loop needs, the backward loop does one matmul per
step (``dr_t @ Uᵀ``), and the recurrent kernel's gradient is one large
matmul over all steps after the loop instead of one small matmul and an
accumulation per step. Both loops are compiled with XLA, which fuses a
step's elementwise work. They take the derivative object, and with it the
cell's functions, as an argument; TensorFlow's trace cache keys it by its
class and the cell's configuration (`_Derivative`), so the two directions
of a ``Bidirectional`` layer, stacked layers of one width, or a new model
of the same configuration compile once per shape. The measurements behind
these choices are in ``benchmarks/RESULTS.md`` ("Run 4: hand-written
gradient", "One formulation per cell").
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import tensorflow as tf
from tensorflow.types.experimental import TraceType

from keras_seq.layers.recurrent.manual_gradient import ManualGradient
from keras_seq.layers.recurrent.masking import mask_step


class _Derivative:
    """A `ManualGradient` as the compiled loops' argument: derivatives of
    equal cells compute alike (their weights are the loops' tensor
    arguments), so the loops' traces are shared between them, keyed by the
    derivative's class and the cell's configuration."""

    def __init__(self, gradient: ManualGradient):
        self.gradient = gradient

    def __tf_tracing_type__(self, context):
        cell = self.gradient.cell
        config = {k: v for k, v in cell.get_config().items() if k != "name"}
        kind = type(self.gradient)
        return _SameComputation(self, (kind.__module__, kind.__qualname__, cell.compute_dtype,
                                       _hashable(config)))


class _SameComputation(TraceType):
    """The tracing type of a `_Derivative`: equal keys trace alike."""

    def __init__(self, derivative, key):
        self.derivative, self.key = derivative, key

    def is_subtype_of(self, other):
        return self == other

    def most_specific_common_supertype(self, others):
        return self if all(self == other for other in others) else None

    def placeholder_value(self, placeholder_context):
        return self.derivative

    def to_tensors(self, value):
        return []

    def from_tensors(self, tensors):
        return self.derivative

    def flatten(self):
        return []

    def cast(self, value, cast_context):
        return value

    def __eq__(self, other):
        return isinstance(other, _SameComputation) and self.key == other.key

    def __hash__(self):
        return hash(self.key)


def _hashable(value):
    """A hashable form of a ``get_config()`` (nested dicts and lists)."""
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value


def run_bptt_recurrence(
    gradient: ManualGradient,
    xs: tf.Tensor,
    initial_states: Sequence[tf.Tensor],
    mask: tf.Tensor | None = None,
    recurrent_mask: tf.Tensor | None = None,
    go_backwards: bool = False,
    return_sequences: bool = False,
    zero_output_for_mask: bool = False,
) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
    """The training loop of a cell with a hand-written gradient.

    The forward loop keeps the states before and after every step and what
    the derivative saves, stacked over time; the backward loop reads them
    back, does one matmul per step and sums the per-step gradients of the
    cell's other weights. The recurrent kernel's gradient is one
    ``(units, T·B) @ (T·B, P)`` matmul after the loop.

    Args:
        gradient: the cell's `ManualGradient`.
        xs: ``(T, B, in)`` inputs, time-major.
        initial_states: list of ``(B, units)`` tensors, h first.
        mask, go_backwards, return_sequences, zero_output_for_mask: as in
            `keras_seq.layers.recurrent.rnn.run_loop`.
        recurrent_mask: optional ``(B, units)`` recurrent dropout mask that
            multiplies h before U.

    Returns:
        ``(last_output, outputs, final_states)`` as ``run_loop``.
    """
    xw = gradient.project(xs)
    kernel, *params = gradient.weights()
    derivative = _Derivative(gradient)
    if mask is not None:
        # expand_dims, not [..., None]: a bool strided slice is not a TFLite builtin.
        mask = tf.expand_dims(tf.transpose(tf.cast(mask, tf.bool)), -1)
    if go_backwards:
        xw = tf.reverse(xw, [0])
        if mask is not None:
            mask = tf.reverse(mask, [0])
    if recurrent_mask is not None:
        # Drawn from the initial state's shape: a tape that watches the state
        # must not take the mask, and with it the compiled loop, as an input.
        recurrent_mask = tf.stop_gradient(recurrent_mask)
    n_states = len(initial_states)

    @tf.custom_gradient
    def bptt(xw, kernel, *args):
        states0, weights = list(args[:n_states]), list(args[n_states:])
        # The gradient is the backward loop below: keep tapes off the forward loop.
        inputs = tf.nest.map_structure(tf.stop_gradient, [xw, kernel, states0, weights])
        last_output, final_states, outputs, saved, history = _forward_loop(
            derivative, *inputs, mask, recurrent_mask, zero_output_for_mask, return_sequences
        )

        def grad(*upstream):
            d_last, d_states = upstream[0], list(upstream[1 : 1 + n_states])
            d_outputs = upstream[1 + n_states] if return_sequences else None
            d_states = [tf.zeros_like(s) if d is None else d for s, d in zip(states0, d_states)]
            if d_last is None:
                d_last = tf.zeros_like(states0[0])
            d_xw, d_r, d_states0, d_params = _backward_loop(
                derivative, xw, kernel, states0, weights, mask, recurrent_mask, saved, history,
                d_last, d_states, d_outputs, zero_output_for_mask,
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

    results = bptt(xw, kernel, *initial_states, *params)
    last_output, states = results[0], list(results[1 : 1 + n_states])
    if return_sequences:
        outputs = tf.transpose(results[1 + n_states], [1, 0, 2])  # (B, T, units)
    else:
        outputs = last_output[:, None]
    return last_output, outputs, states


def _num_steps(xw):
    return xw.shape[0] if xw.shape[0] is not None else tf.shape(xw)[0]


def mask_step_backward(mask_t, d_new_states, d_output, zero_output_for_mask: bool):
    """The derivative of `mask_step`, for the backward loop.

    The step's output is its first new state (h), so the gradient reaching
    the masked output goes to ``h`` where the step counts and to the carried
    previous output where it does not; a masked step passes the state
    gradients straight through to the previous states.

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


# The two loops, each compiled with XLA once per shape and computation (see
# `_Derivative`): fusing the elementwise work of a step
# into a few kernels is what makes the hand-written gradient pay off on CPU
# (run op by op, a step's ~30 small ops cost more than its matmul).
_COMPILED = dict(jit_compile=True, autograph=False, reduce_retracing=True)


@functools.partial(tf.function, **_COMPILED)
def _forward_loop(derivative, xw, kernel, states0, params, mask, recurrent_mask,
                  zero_output_for_mask, return_sequences):
    """Forward loop; also returns what the backward loop needs, stacked over time."""
    gradient = derivative.gradient
    steps = _num_steps(xw)
    n_states = len(states0)
    batch = states0[0].shape[0]

    def array(shape, size=steps):
        return tf.TensorArray(xw.dtype, size=size, element_shape=shape)

    saved_tas = [array((batch, width)) for width in gradient.saved_widths]
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
        new_states, saved = gradient.forward(
            tf.gather(xw, t), tf.matmul(h_in, kernel), states, params
        )
        output = new_states[0]
        if mask is not None:
            output, new_states = mask_step(
                tf.gather(mask, t), output, new_states, states, carry[-1],
                zero_output if zero_output_for_mask else None,
            )
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


@functools.partial(tf.function, **_COMPILED)
def _backward_loop(derivative, xw, kernel, states0, params, mask, recurrent_mask, saved,
                   history, d_last, d_states, d_outputs, zero_output_for_mask):
    """Backward loop: gradients of xw and r (stacked), the initial states and params."""
    gradient = derivative.gradient
    steps = _num_steps(xw)
    n_states = len(states0)
    d_xw_ta = tf.TensorArray(xw.dtype, size=steps, element_shape=xw.shape[1:])
    d_r_ta = tf.TensorArray(
        xw.dtype, size=0 if gradient.d_r_is_d_xw else steps, element_shape=xw.shape[1:]
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
            d_output = carry[-1]
            if d_outputs is not None:
                d_output = d_output + tf.gather(d_outputs, t)
            # Masked steps pass the state gradients straight to the previous step.
            d_new, through, d_prev_output = mask_step_backward(
                tf.gather(mask, t), d_new, d_output, zero_output_for_mask
            )
        d_xw_t, d_r_t, d_prev, d_params_t = gradient.backward(
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
        if not gradient.d_r_is_d_xw:
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
    d_r = d_xw if gradient.d_r_is_d_xw else result[2].stack()
    d_params = [tf.reduce_sum(g, 0) for g in result[3]]
    d_states0 = list(result[4 : 4 + n_states])
    return d_xw, d_r, d_states0, d_params
