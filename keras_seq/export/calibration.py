"""The calibration examples of a run's integer exports (``--quantize int8|int16x8``).

An integer TFLite file's activation ranges come from running the float model
on real inputs (`keras_seq.export.integer_tflite`). A run's exports take them
from the run's own training split, read again from its recorded options
(`keras_seq.recipes.recipe.Recipe.training_examples`): never from the
held-out examples that ``keras-seq verify`` scores. Each task's exporter
turns them into its files' inputs: token ids for a classifier, a tagger and
a translator's encoder; for a step (a translator's decoder step, a language
model's generation step), the inputs a device feeds it, recorded while the
float step runs over training examples (`step_examples`).
"""

from __future__ import annotations

import numpy as np

from keras_seq._validation import ArgumentValueError, check_positive_int


class Calibration:
    """How many examples calibrate each integer file, and the run's training
    split, read once when first asked for.

    Args:
        read: returns the run's training split (its recipe's
            `Recipe.training_examples`).
        count: examples per integer file.
    """

    def __init__(self, read, count: int):
        self._read = read
        self.count = check_positive_int("export_run", "calibration_examples", count)
        self._training = None

    def training(self):
        """The run's training split."""
        if self._training is None:
            try:
                self._training = self._read()
            except (OSError, ValueError, TypeError) as error:  # the file, or what was recorded
                raise ArgumentValueError(
                    "export_run", "integer quantization calibrates on the run's training "
                    f"data, which cannot be read again ({error}); export without int8 or "
                    "int16x8, or run from the folder the run was trained in.") from None
        return self._training


def step_examples(step, first, advance, sequences, count: int) -> list[list[np.ndarray]]:
    """The inputs a step is fed over ``sequences``, up to ``count`` of them.

    Args:
        step: ``step(*inputs) -> (output, *new_state)``, a traced function.
        first: ``first(sequence) -> inputs``: the first step's inputs over a
            sequence.
        advance: ``advance(inputs, outputs, sequence, t) -> inputs`` of step
            ``t + 1`` given step ``t``'s, or None when the sequence ends.
        sequences: what `first` and `advance` read, one per sequence.
        count: how many examples.
    """
    examples = []
    for sequence in sequences:
        inputs = first(sequence)
        t = 0
        while inputs is not None and len(examples) < count:
            examples.append([np.asarray(x) for x in inputs])
            outputs = [o.numpy() for o in step(*inputs)]
            inputs = advance(inputs, outputs, sequence, t)
            t += 1
        if len(examples) >= count:
            break
    return examples


def rows(ids) -> list[np.ndarray]:
    """Each row of ``ids`` ``(N, ...)`` as a batch of one."""
    ids = np.asarray(ids)
    return [ids[i : i + 1] for i in range(ids.shape[0])]


def as_traced(function, signature):
    """``function`` traced once for ``signature`` with a dynamic batch (fast to
    call many times)."""
    import tensorflow as tf

    return tf.function(function, input_signature=signature, autograph=False)
