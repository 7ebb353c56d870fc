"""Sinusoidal positional encoding, computed from positions (no table)."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq import _validation


@keras.saving.register_keras_serializable(package="keras_seq")
class SinusoidalPositionalEncoding(keras.layers.Layer):
    """Adds the sinusoidal position signal of Vaswani et al. 2017 to its input.

    For input `x` of shape `(B, T, d)` and positions `t = start_index + 0..T-1`:

        P[t, 2j]   = sin(t / w^(2j/d))
        P[t, 2j+1] = cos(t / w^(2j/d))
        output     = x + P

    with `w = max_wavelength`. P is computed arithmetically from the positions
    rather than sliced from a precomputed table, so any length works and a
    tensor `start_index` gives one compiled graph for every decoding step
    (slicing a table at a tensor offset makes XLA recompile per position).
    An odd `d` is allowed: the last feature is the sine of frequency
    `j = (d - 1) / 2`. The Keras mask of `x` passes through unchanged.

    Args:
        max_wavelength: float, the longest wavelength w (default 10000).

    Call arguments:
        inputs: `(B, T, d)` tensor.
        start_index: int or scalar int tensor, the position of `inputs[:, 0]`
            (default 0); use the step number when decoding one token at a time.

    Example:

    ```python
    import numpy as np
    from keras_seq.layers import SinusoidalPositionalEncoding

    pe = SinusoidalPositionalEncoding()
    x = np.zeros((2, 50, 16), "float32")
    y = pe(x)                                   # (2, 50, 16)
    y7 = pe(x[:, 7:8], start_index=7)           # equals y[:, 7:8]
    ```

    References:
        - Vaswani et al., 2017. Attention Is All You Need, section 3.5.
          https://arxiv.org/abs/1706.03762
    """

    def __init__(self, max_wavelength: float = 10000.0, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = _validation.check_float(
            self, "max_wavelength", max_wavelength, low=1.0, low_inclusive=False
        )
        self.supports_masking = True

    def build(self, inputs_shape):
        if len(inputs_shape) != 3 or inputs_shape[-1] is None:
            raise _validation.shape_error(
                self, "inputs", "(batch, time, features) with known features", inputs_shape
            )
        self.built = True

    def call(self, inputs, start_index=0):
        d = inputs.shape[-1]
        t = ops.cast(ops.arange(ops.shape(inputs)[1]), "float32")
        t = t + ops.cast(start_index, "float32")  # (T,)
        two_j = ops.arange(0, d, 2, dtype="float32")  # 2j, (ceil(d/2),)
        inverse_wavelength = ops.exp(-two_j / d * ops.log(self.max_wavelength))
        angle = ops.expand_dims(t, 1) * ops.expand_dims(inverse_wavelength, 0)
        # Interleave so sin lands on even and cos on odd features.
        P = ops.stack([ops.sin(angle), ops.cos(angle)], axis=-1)  # (T, ceil(d/2), 2)
        P = ops.reshape(P, (-1, 2 * two_j.shape[0]))[:, :d]  # (T, d)
        return inputs + ops.cast(P, inputs.dtype)[None]

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength})
        return config
