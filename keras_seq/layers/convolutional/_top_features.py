"""The flattening of the DCNN's top feature maps, without their mask."""

from __future__ import annotations

import keras


# Registered under the name it was saved with before it moved here from
# `keras_seq.models.dcnn`, so `.keras` files of `dcnn_classifier` still load.
@keras.saving.register_keras_serializable(package="keras_seq", name="_TopFeatures")
class TopFeatures(keras.layers.Flatten):
    """`Flatten` that takes the top pooling's mask and drops it: the steps it
    marks already hold zeros, and a mask on the logits would reach the loss."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def compute_mask(self, inputs, mask=None):
        return None
