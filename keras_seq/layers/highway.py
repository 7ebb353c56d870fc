"""Highway layer (Srivastava et al. 2015)."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq import _validation


@keras.saving.register_keras_serializable(package="keras_seq")
class Highway(keras.layers.Layer):
    """A highway layer: a gated mix of a dense transform and its input.

        H(x) = activation(x W + b)
        t    = σ(x W_T + b_T)                  (the transform gate)
        y    = t ⊙ H(x) + (1 − t) ⊙ x

    on the last axis of any input of rank >= 2; the output has the input's
    shape, and the Keras mask passes through. ``b_T`` starts at the constant
    ``transform_gate_bias``: a negative value makes t small at first, so the
    layer starts close to the identity and deep stacks of it train.

    Weights (`get_weights()` order, d the input width): ``kernel (d, d)``,
    ``bias (d,)``, ``transform_kernel (d, d)``, ``transform_bias (d,)``.

    Args:
        activation: activation of H (a Keras activation name or callable).
            Default ``"relu"``.
        transform_gate_bias: float, the initial value of every entry of
            ``transform_bias``. Default -1.0.
        kernel_initializer: initializer of ``kernel`` and ``transform_kernel``.
            Default ``"glorot_uniform"``.
        bias_initializer: initializer of ``bias``. Default ``"zeros"``.
        kernel_regularizer: regularizer of both kernels. Default None.
        bias_regularizer: regularizer of both biases. Default None.
        kernel_constraint: constraint of both kernels. Default None.
        bias_constraint: constraint of both biases. Default None.

    Examples:
        >>> import numpy as np
        >>> highway = Highway()
        >>> x = np.ones((2, 5, 8), "float32")
        >>> tuple(highway(x).shape), [tuple(w.shape) for w in highway.get_weights()]
        ((2, 5, 8), [(8, 8), (8,), (8, 8), (8,)])
        >>> highway.transform_bias.numpy()[:3]
        array([-1., -1., -1.], dtype=float32)

    References:
        Srivastava, Greff, Schmidhuber. Highway Networks. 2015.
        https://arxiv.org/abs/1505.00387
    """

    def __init__(
        self,
        activation="relu",
        transform_gate_bias: float = -1.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.activation = _validation.check_activation(self, "activation", activation)
        self.transform_gate_bias = _validation.check_float(
            self, "transform_gate_bias", transform_gate_bias
        )
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.supports_masking = True

    def build(self, inputs_shape):
        if len(inputs_shape) < 2 or inputs_shape[-1] is None:
            raise _validation.shape_error(
                self, "inputs", "rank >= 2 with a known last axis", inputs_shape
            )
        d = inputs_shape[-1]

        def weight(name, shape, initializer, kind):
            return self.add_weight(
                name=name,
                shape=shape,
                initializer=initializer,
                regularizer=getattr(self, f"{kind}_regularizer"),
                constraint=getattr(self, f"{kind}_constraint"),
            )

        self.kernel = weight("kernel", (d, d), self.kernel_initializer, "kernel")
        self.bias = weight("bias", (d,), self.bias_initializer, "bias")
        self.transform_kernel = weight(
            "transform_kernel", (d, d), self.kernel_initializer, "kernel"
        )
        self.transform_bias = weight(
            "transform_bias",
            (d,),
            keras.initializers.Constant(self.transform_gate_bias),
            "bias",
        )
        self.built = True

    def call(self, inputs):
        inputs = _validation.float_inputs(self, inputs)
        h = self.activation(ops.matmul(inputs, self.kernel) + self.bias)  # H(x)
        t = ops.sigmoid(ops.matmul(inputs, self.transform_kernel) + self.transform_bias)
        return t * h + (1.0 - t) * inputs

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "activation": keras.activations.serialize(self.activation),
                "transform_gate_bias": self.transform_gate_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
                "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
                "kernel_constraint": keras.constraints.serialize(self.kernel_constraint),
                "bias_constraint": keras.constraints.serialize(self.bias_constraint),
            }
        )
        return config
