"""The wide one-dimensional convolution of the DCNN (Kalchbrenner et al. 2014, §3.1)."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq import _validation


@keras.saving.register_keras_serializable(package="keras_seq")
class WideConvolution1D(keras.layers.Layer):
    """The DCNN's wide one-dimensional convolution, row by row, with a mask.

    The input is ``(B, T, d)`` (one feature map, a sentence matrix of ``d``
    rows) or ``(B, T, n_in, d)`` (``n_in`` feature maps). Each of the ``d``
    rows is convolved on its own over time, and the ``n_in`` input maps are
    summed into each of the ``filters`` output maps (§3.1 and §5.1 of the
    paper):

        out[t, j, r] = Σ_w Σ_k x̃[t + w, k, r] · kernel[w, k, j, r] + bias[j, r]

    where x̃ is the input with its masked steps set to zero and ``m − 1``
    zeros added on both sides of the time axis (the *wide* convolution), so
    the output has ``T + m − 1`` steps: ``(B, T + m − 1, filters, d)``. (As
    in Keras' ``Conv1D`` the kernel is not flipped.) The paper adds its row
    bias after k-max pooling; a bias constant over time moves every value of
    a row alike, so pooling chooses the same steps and adding it here is the
    same function.

    **Mask.** Output step t covers input steps ``t − m + 1 … t``; it is valid
    when that window touches at least one valid input step. For a sequence of
    ``s`` valid steps at the start of a padded batch, exactly its first
    ``s + m − 1`` output steps are valid, and they equal the output of the
    sequence alone.

    Weights (`get_weights()` order): ``kernel (m, n_in, filters, d)``,
    ``bias (filters, d)``.

    Args:
        filters: int, number of output feature maps.
        kernel_size: int, filter width m.
        kernel_initializer: initializer of ``kernel``. Default
            ``"glorot_uniform"``.
        bias_initializer: initializer of ``bias``. Default ``"zeros"``.

    Examples:
        >>> import numpy as np
        >>> conv = WideConvolution1D(filters=3, kernel_size=4)
        >>> y = conv(np.ones((2, 6, 8), "float32"), mask=np.arange(6)[None] < np.array([[6], [2]]))
        >>> tuple(y.shape), conv.compute_mask(None, np.arange(6)[None] < np.array([[6], [2]]))[1].numpy()
        ((2, 9, 3, 8), array([ True,  True,  True,  True,  True, False, False, False, False]))

    References:
        Kalchbrenner, Grefenstette, Blunsom. A Convolutional Neural Network
        for Modelling Sentences. ACL 2014. https://arxiv.org/abs/1404.2188
    """

    def __init__(
        self,
        filters: int,
        kernel_size: int,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.filters = _validation.check_positive_int(self, "filters", filters)
        self.kernel_size = _validation.check_positive_int(self, "kernel_size", kernel_size)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def build(self, inputs_shape):
        if len(inputs_shape) not in (3, 4) or any(d is None for d in inputs_shape[2:]):
            raise _validation.shape_error(
                self, "inputs", "(batch, time, rows) or (batch, time, maps, rows) with known "
                "maps and rows", inputs_shape,
            )
        maps_in = 1 if len(inputs_shape) == 3 else inputs_shape[2]
        rows = inputs_shape[-1]
        self.kernel = self.add_weight(
            name="kernel",
            shape=(self.kernel_size, maps_in, self.filters, rows),
            initializer=self.kernel_initializer,
        )
        self.bias = self.add_weight(
            name="bias", shape=(self.filters, rows), initializer=self.bias_initializer
        )
        self.built = True

    def call(self, inputs, mask=None):
        x = inputs if len(inputs.shape) == 4 else ops.expand_dims(inputs, 2)  # (B, T, n_in, d)
        if mask is not None:
            x = x * ops.cast(ops.reshape(mask, (ops.shape(x)[0], -1, 1, 1)), x.dtype)
        m = self.kernel_size
        x = ops.pad(x, ((0, 0), (m - 1, m - 1), (0, 0), (0, 0)))
        steps = ops.shape(x)[1] - (m - 1)  # T + m - 1
        # (B, T + m - 1, m, n_in, d): the m inputs under each output step
        windows = ops.stack([x[:, w : w + steps] for w in range(m)], axis=2)
        windows = ops.reshape(windows, (ops.shape(x)[0], steps, -1, x.shape[-1]))
        kernel = ops.reshape(self.kernel, (-1, self.filters, x.shape[-1]))  # (m * n_in, n_out, d)
        # Per row r: (B, T', m * n_in) @ (m * n_in, n_out)
        out = ops.einsum("btcr,cjr->btjr", windows, kernel)
        return out + self.bias

    def compute_output_shape(self, inputs_shape):
        steps = inputs_shape[1]
        steps = None if steps is None else steps + self.kernel_size - 1
        return (inputs_shape[0], steps, self.filters, inputs_shape[-1])

    def compute_mask(self, inputs, mask=None):
        if mask is None:
            return None
        m = self.kernel_size
        valid = ops.pad(ops.cast(mask, "float32"), ((0, 0), (m - 1, m - 1)))
        # Output step t is valid if any of the padded steps t .. t + m - 1 is:
        # a max over windows of m (an op whose output length follows the input's).
        touched = ops.max_pool(ops.expand_dims(valid, -1), m, strides=1, padding="valid")
        return ops.squeeze(touched, -1) > 0

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "filters": self.filters,
                "kernel_size": self.kernel_size,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
