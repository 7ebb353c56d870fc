"""Sinusoidal positional encoding, computed from positions (no table)."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq import _validation


@keras.saving.register_keras_serializable(package="keras_seq")
class SinusoidalPositionalEncoding(keras.layers.Layer):
    """Adds the sinusoidal position signal of Vaswani et al. 2017 to its input.

    For input `x` of shape `(..., T, d)` (any leading axes, e.g. `(B, T, d)`
    or `(B, X, T, d)`) and positions `t`, by default `start_index + 0..T-1`:

        P[t, 2j]   = sin(t / w^(2j/d))
        P[t, 2j+1] = cos(t / w^(2j/d))
        output     = x + P

    with `w = max_wavelength`. P is computed arithmetically from the positions
    rather than sliced from a precomputed table, so any length works and a
    tensor `start_index` gives one compiled graph for every decoding step
    (slicing a table at a tensor offset makes XLA recompile per position).
    An odd `d` is allowed: the last feature is the sine of frequency
    `j = (d - 1) / 2`. P is computed in float32 and added in the compute
    dtype; an integer `x` is first cast to the compute dtype (float32, or
    float16 under `mixed_float16`), so the output is `float(x) + P`. The
    Keras mask of `x` passes through unchanged.

    The call arguments are those of KerasHub's `SinePositionEncoding`, which
    returns P alone; this layer returns `x + P`.

    Args:
        max_wavelength: float, the longest wavelength w (default 10000).

    Call arguments:
        inputs: `(..., T, d)` tensor of rank 3 or more, with a known `d`.
        start_index: int or scalar int tensor, the position of the first step
            `inputs[..., 0, :]` (default 0); use the step number when
            decoding one token at a time. Ignored when `positions` is given.
        positions: optional `(..., T)` tensor of explicit positions (integer
            or float), e.g. `(T,)` or `(B, T)`, broadcastable to the leading
            axes of `inputs` (`inputs.shape[:-1]`, aligned on the right as in
            NumPy); P is computed at these positions instead of
            `start_index + 0..T-1`.

    Examples:
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
        if len(inputs_shape) < 3 or inputs_shape[-1] is None:
            raise _validation.shape_error(
                self,
                "inputs",
                "rank 3 or more, (batch, ..., time, features), with known features",
                inputs_shape,
            )
        self.built = True

    def call(self, inputs, start_index=0, positions=None):
        x = _validation.float_inputs(self, inputs)
        d = x.shape[-1]
        if positions is None:
            t = ops.cast(ops.arange(ops.shape(x)[-2]), "float32")
            t = t + ops.cast(start_index, "float32")  # (T,)
        else:
            positions = ops.convert_to_tensor(positions)
            self._check_positions(x.shape, positions.shape)
            t = ops.cast(positions, "float32")  # (..., T)
        i = ops.arange(d)
        two_j = ops.cast(i - i % 2, "float32")  # 2j of features 2j and 2j+1, (d,)
        inverse_wavelength = ops.exp(-two_j / d * ops.log(self.max_wavelength))
        angle = ops.expand_dims(t, -1) * inverse_wavelength  # (..., T, d)
        P = ops.where(ops.equal(i % 2, 0), ops.sin(angle), ops.cos(angle))
        return x + ops.cast(P, x.dtype)

    def _check_positions(self, inputs_shape, positions_shape) -> None:
        """`positions` must be `(..., T)` and broadcast to `inputs.shape[:-1]`, so
        that the output has the shape of `inputs` (checked on static dimensions)."""
        leading = tuple(inputs_shape[:-1])  # (..., T)
        shape = tuple(positions_shape)
        pairs = list(zip(reversed(shape), reversed(leading)))
        fits = 1 <= len(shape) <= len(leading) and all(
            p is None or x is None or p == x or (p == 1 and axis > 0)
            for axis, (p, x) in enumerate(pairs)
        )
        if not fits:
            raise _validation.shape_error(
                self,
                "positions",
                f"(..., time) broadcastable to the leading axes of `inputs`, {leading}",
                shape,
            )

    def compute_output_shape(self, inputs_shape, positions_shape=None):
        shape = list(inputs_shape)
        if positions_shape is not None:
            self._check_positions(inputs_shape, positions_shape)
            # An axis unknown in `inputs` takes its size from `positions`.
            offset = len(shape) - 1 - len(positions_shape)
            for axis, size in enumerate(positions_shape):
                if shape[offset + axis] is None and size != 1:
                    shape[offset + axis] = size
        return tuple(shape)

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength})
        return config
