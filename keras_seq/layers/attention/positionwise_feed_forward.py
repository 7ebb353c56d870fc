"""Position-wise feed-forward network of the Transformer."""

from __future__ import annotations

import keras

from keras_seq import _validation
from keras_seq.layers.quantization import SublayerQuantization


@keras.saving.register_keras_serializable(package="keras_seq")
class PositionwiseFeedForward(SublayerQuantization, keras.layers.Layer):
    """Two dense layers applied to every position alike (Vaswani et al. 2017, eq. 2).

        FFN(x) = dropout(activation(x W_1 + b_1) W_2 + b_2)

    `W_1` is `(d, intermediate_dim)`, `W_2` is `(intermediate_dim, d)`: the
    output width equals the input width `d`. Weights, in `get_weights()`
    order: intermediate kernel/bias, output kernel/bias (sub-layers
    `intermediate_dense` and `output_dense`).

    Args:
        intermediate_dim: int, width of the hidden layer (d_ff).
        activation: activation of the hidden layer (default `"relu"`).
        dropout: float, dropout rate on the output.
        kernel_initializer: initializer of both kernels.
        bias_initializer: initializer of both biases.

    Examples:
        ```python
        import numpy as np
        from keras_seq.layers import PositionwiseFeedForward

        ffn = PositionwiseFeedForward(intermediate_dim=32)
        y = ffn(np.random.rand(2, 5, 8).astype("float32"))   # (2, 5, 8)
        ```

    References:
        - Vaswani et al., 2017. Attention Is All You Need, section 3.3.
          https://arxiv.org/abs/1706.03762
    """

    def __init__(
        self,
        intermediate_dim: int,
        activation="relu",
        dropout: float = 0.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.intermediate_dim = _validation.check_positive_int(
            self, "intermediate_dim", intermediate_dim
        )
        self.activation = _validation.check_activation(self, "activation", activation)
        self.dropout = _validation.check_rate(self, "dropout", dropout)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def _dense(self, units, name, activation=None):
        return keras.layers.Dense(
            units,
            activation=activation,
            kernel_initializer=self.kernel_initializer.__class__.from_config(
                self.kernel_initializer.get_config()
            ),
            bias_initializer=self.bias_initializer.__class__.from_config(
                self.bias_initializer.get_config()
            ),
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, inputs_shape):
        d = inputs_shape[-1]
        if d is None:
            raise _validation.shape_error(self, "inputs", "a known last axis", inputs_shape)
        self.intermediate_dense = self._dense(
            self.intermediate_dim, "intermediate_dense", self.activation
        )
        self.intermediate_dense.build(inputs_shape)
        self.output_dense = self._dense(d, "output_dense")
        self.output_dense.build(tuple(inputs_shape[:-1]) + (self.intermediate_dim,))
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def call(self, inputs, training=None):
        h = self.intermediate_dense(inputs)  # (B, T, d_ff)
        return self.dropout_layer(self.output_dense(h), training=training)  # (B, T, d)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "intermediate_dim": self.intermediate_dim,
                "activation": keras.activations.serialize(self.activation),
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
