"""The parallel form of a recurrent layer: a cell's whole sequence at once.

A cell with a ``parallel`` method (`keras_seq.layers.RecurrentCell`) computes
all steps of a projected sequence in one call; `RNN` runs it in training
(`run_parallel`) and keeps Keras' semantics around it: ``go_backwards``, the
output of masked steps, ``return_sequences``. The recurrences whose state
update is linear (h_t = a_t ⊙ h_{t-1} + b_t: `MinGRU`, `MinLSTM`, `RGLRU`)
compute it with `linear_recurrence`, the backend's differentiable scan with
Keras' masking rule.
"""

from __future__ import annotations

from keras import ops

from keras_seq.layers.recurrent import backend

__all__ = ["linear_recurrence", "run_parallel"]


def linear_recurrence(a, b, h0, mask=None):
    """``h_t = a_t ⊙ h_{t-1} + b_t`` for every step, from ``h0``.

    Args:
        a: ``(B, T, n)`` coefficients that multiply the state.
        b: ``(B, T, n)`` coefficients added to it.
        h0: ``(B, n)`` state before the first step.
        mask: optional ``(B, T)`` bool, True = keep; a masked step carries the
            state (a_t = 1, b_t = 0 there), as Keras' masking rule does.

    Returns:
        ``h (B, T, n)``; ``h[:, -1]`` is the state after the last valid step.

    Examples:
        >>> import numpy as np
        >>> a = np.full((1, 3, 1), 0.5, "float32"); b = np.ones((1, 3, 1), "float32")
        >>> np.asarray(linear_recurrence(a, b, np.zeros((1, 1), "float32")))[0, :, 0]
        array([1.  , 1.5 , 1.75], dtype=float32)
    """
    a, b = ops.convert_to_tensor(a), ops.convert_to_tensor(b)
    h0 = ops.cast(h0, b.dtype)
    if mask is not None:
        keep = ops.expand_dims(ops.cast(mask, "bool"), -1)
        a = ops.where(keep, a, ops.ones_like(a))
        b = ops.where(keep, b, ops.zeros_like(b))
    return backend.linear_scan(a, b, h0)


def run_parallel(cell, sequences, states, mask=None, go_backwards: bool = False,
                 return_sequences: bool = False, zero_output_for_mask: bool = False,
                 training=None, output_is_first_state: bool = False):
    """Runs ``cell.parallel`` over ``sequences`` with Keras' semantics.

    The cell sees the projected sequence in processing order (flipped for
    ``go_backwards``; the outputs stay in that order, as in Keras) and the
    mask, and carries its states over masked steps. Here a masked step's
    output becomes the previous step's output (zeros before the first valid
    step), or zeros with ``zero_output_for_mask``, as `run_loop` makes it.

    Args:
        cell: a `RecurrentCell` with ``parallel``.
        sequences: ``(B, T, in)`` batch-major inputs (input dropout applied).
        states: list of ``(B, size)`` initial states.
        mask, go_backwards, return_sequences, zero_output_for_mask, training:
            as in `keras_seq.layers.recurrent.rnn.run_loop`.
        output_is_first_state: the cell's output is its first state
            (`keras_seq.layers.recurrent.rnn.output_is_first_state`).

    Returns:
        ``(last_output, outputs, final_states)`` as `run_loop` returns them.
    """
    if mask is not None:
        mask = ops.cast(mask, "bool")
    if go_backwards:
        sequences = ops.flip(sequences, 1)
        mask = None if mask is None else ops.flip(mask, 1)
    outputs, new_states = cell.parallel(cell.project(sequences), list(states), mask=mask,
                                        training=training)
    if mask is not None:
        keep = ops.expand_dims(mask, -1)
        if zero_output_for_mask:
            outputs = ops.where(keep, outputs, ops.zeros_like(outputs))
        elif output_is_first_state:
            # The cell carried h over masked steps: only the steps before the
            # first valid one differ (Keras' loop outputs zeros there, not h0).
            seen = ops.cumsum(ops.cast(keep, "int32"), axis=1) > 0
            outputs = ops.where(seen, outputs, ops.zeros_like(outputs))
        else:
            # o_t = o_{t-1} at a masked step, y_t at a valid one; o_0 = 0.
            zeros = ops.zeros_like(outputs[:, 0])
            outputs = linear_recurrence(ops.zeros_like(outputs), outputs, zeros, mask)
    last_output = outputs[:, -1]
    if not return_sequences:
        outputs = ops.expand_dims(last_output, 1)
    return last_output, outputs, list(new_states)
