"""The padding mask of token ids as a model tensor."""

from __future__ import annotations

import keras


@keras.saving.register_keras_serializable(package="keras_seq")
class PaddingMask(keras.layers.Layer):
    """Boolean padding mask ``ids != pad_id`` as an explicit model tensor.

    Examples:
        >>> mask = PaddingMask()(keras.ops.array([[4, 0]]))
        >>> keras.ops.convert_to_numpy(mask).tolist()
        [[True, False]]
    """

    def __init__(self, pad_id: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.pad_id = int(pad_id)

    def call(self, inputs):
        return keras.ops.not_equal(inputs, self.pad_id)

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(inputs.shape, dtype="bool")

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}
