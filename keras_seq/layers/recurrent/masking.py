"""Keras' masking rule for one step of a recurrent loop.

Shared by the one loop (`keras_seq.layers.recurrent.rnn.run_loop`) and the
hand-written derivatives' training loop
(`keras_seq.layers.recurrent.bptt_tensorflow`); it imports nothing of the
package, so that both can.
"""

from __future__ import annotations

from keras import ops

__all__ = ["mask_step"]


def mask_step(mask_t, output, new_states, states, prev_output, zero_output=None):
    """Keras' masking rule for one step.

    Where ``mask_t`` (``(B, 1)`` bool) is False the states stay ``states``
    and the output is ``prev_output``, or ``zero_output`` when given
    (``zero_output_for_mask``).
    """
    new_states = [ops.where(mask_t, n, s) for n, s in zip(new_states, states)]
    previous = prev_output if zero_output is None else zero_output
    return ops.where(mask_t, output, previous), new_states
