"""Zoneout (Krueger et al. 2017): the rates, the training keep-masks and the mix of states.

One home for the rule, used by this package's cells (`RecurrentCell`), by
Keras' own cells in `ConvertibleLSTM` / `ConvertibleSimpleRNN`, and by
`RecurrentDecoder`: the cell computes its ordinary update s̃_t from s_{t−1};
in training each unit of each state keeps s_{t−1} where its keep-mask is 1
(probability z), else takes s̃_t; at inference s_t = z·s_{t−1} + (1 − z)·s̃_t.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_seq._validation import invalid_value

__all__ = ["apply_zoneout", "has_zoneout", "state_sizes", "zoneout_masks", "zoneout_rates"]


def state_sizes(state_size) -> list[int]:
    """A cell's ``state_size`` (an int or one per state) as a list."""
    if isinstance(state_size, (list, tuple)):
        return [int(s) for s in state_size]
    return [int(state_size)]


def zoneout_rates(zoneout, state_size, owner) -> list[float]:
    """One rate per state, in state order (a float applies to all).

    ``zoneout`` is already checked by `keras_seq._validation.check_zoneout`;
    a list of the wrong length is a ``ValueError`` naming ``owner``.
    """
    sizes = state_sizes(state_size)
    if not isinstance(zoneout, (list, tuple)):
        return [float(zoneout)] * len(sizes)
    if len(zoneout) != len(sizes):
        raise invalid_value(
            owner, "zoneout", f"a float in [0, 1), or one per state ({len(sizes)} values)",
            f"{len(zoneout)} values {list(zoneout)}",
        )
    return [float(z) for z in zoneout]


def has_zoneout(rates) -> bool:
    return any(rate > 0.0 for rate in rates)


def zoneout_masks(rates, state_size, shape_prefix, seed_generator, dtype) -> list:
    """Fresh keep-masks for training, one per state: 1 where a unit keeps its
    previous value (probability z), else 0; ``None`` for a state with z = 0.
    ``shape_prefix``: ``(B,)`` for one step, ``(T, B)`` for a sequence."""
    masks = []
    for rate, size in zip(rates, state_sizes(state_size)):
        if rate <= 0.0:
            masks.append(None)
            continue
        draw = keras.random.uniform((*shape_prefix, size), seed=seed_generator)
        masks.append(ops.cast(draw < rate, dtype))
    return masks


def apply_zoneout(rates, states, new_states, keep_masks=None) -> list:
    """The zoned-out states: with ``keep_masks`` (training) each unit keeps its
    previous value where its mask is 1; without (inference), the expectation
    z·previous + (1 − z)·new."""
    zoned = []
    for i, (rate, old, new) in enumerate(zip(rates, states, new_states)):
        if rate <= 0.0:
            zoned.append(new)
        elif keep_masks is not None:
            zoned.append(ops.where(keep_masks[i] > 0.5, old, new))
        else:
            rate = ops.cast(rate, new.dtype)
            zoned.append(rate * old + (1.0 - rate) * new)
    return zoned
