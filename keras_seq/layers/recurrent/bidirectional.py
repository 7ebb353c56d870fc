"""`Bidirectional`: Keras' wrapper, passing the input mask on as Keras 3.15's does."""

from __future__ import annotations

import keras

__all__ = ["Bidirectional"]


@keras.saving.register_keras_serializable(package="keras_seq")
class Bidirectional(keras.layers.Bidirectional):
    """`keras.layers.Bidirectional` whose sequence outputs keep the input's mask.

    Keras 3.16 sets ``supports_masking = False`` on its wrapper, so the mask of
    an ``Embedding(mask_zero=True)`` stops there: a layer after it (attention
    over the encoder, a second recurrent layer, a pooling) then reads the
    padding as data, silently. This wrapper takes the same arguments, holds
    the same weights and config, and computes the same outputs and masks
    (Keras' ``compute_mask``: the input mask on a ``return_sequences``
    output, none on states); it only keeps the mask on. On Keras 3.15, whose
    wrapper passes the mask on already, it is the same layer. The model
    builders of `keras_seq.models` use it.

    Examples:
        >>> import keras, numpy as np
        >>> from keras_seq import layers
        >>> ids = keras.Input((None,), dtype="int32")
        >>> x = keras.layers.Embedding(10, 4, mask_zero=True)(ids)
        >>> h = layers.Bidirectional(layers.GRU(3, return_sequences=True))(x)
        >>> h._keras_mask is not None
        True
    """

    def __init__(self, layer, *args, **kwargs):
        super().__init__(layer, *args, **kwargs)
        self.supports_masking = True
