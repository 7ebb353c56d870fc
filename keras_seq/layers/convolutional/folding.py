"""Folding of neighbouring feature rows (Kalchbrenner et al. 2014, §3.4)."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq import _validation


@keras.saving.register_keras_serializable(package="keras_seq")
class Folding(keras.layers.Layer):
    """Sums every pair of neighbouring features: the DCNN's folding.

        out[..., j] = x[..., 2j] + x[..., 2j+1]

    ``(B, T, d)`` becomes ``(B, T, d/2)`` (any input of rank >= 2 folds its
    last axis). In the DCNN the rows of a feature map are convolved
    independently; folding lets each row see its neighbour before the top
    layer, at no cost in parameters. The last axis must be even (an odd one
    is a ``ValueError`` at build time). The Keras mask passes through.

    Examples:
        >>> import numpy as np
        >>> x = np.arange(8, dtype="float32").reshape(1, 2, 4)
        >>> Folding()(x).numpy()
        array([[[ 1.,  5.],
                [ 9., 13.]]], dtype=float32)

    References:
        Kalchbrenner, Grefenstette, Blunsom. A Convolutional Neural Network
        for Modelling Sentences. ACL 2014. https://arxiv.org/abs/1404.2188
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def build(self, inputs_shape):
        d = inputs_shape[-1] if len(inputs_shape) >= 2 else None
        if d is None or d % 2:
            raise _validation.shape_error(
                self, "inputs", "rank >= 2 with a known, even last axis", inputs_shape
            )
        self.built = True

    def call(self, inputs):
        shape = ops.shape(inputs)
        pairs = ops.reshape(inputs, (*shape[:-1], inputs.shape[-1] // 2, 2))  # (..., d/2, 2)
        return ops.sum(pairs, axis=-1)

    def compute_output_shape(self, inputs_shape):
        return (*inputs_shape[:-1], inputs_shape[-1] // 2)
