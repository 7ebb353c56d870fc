"""ELMo's scalar mix of layer representations (Peters et al. 2018)."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq import _validation
from keras_seq._validation import ArgumentTypeError


@keras.saving.register_keras_serializable(package="keras_seq")
class ScalarMix(keras.layers.Layer):
    """A learned, softmax-normalised weighted sum of N layers' outputs.

    ELMo's task-specific combination of the biLM layers (Peters et al. 2018,
    eq. 1), for a list of N tensors h_0 … h_{N−1} of one shape:

        s = softmax(w)                  (over the N layers)
        y = γ Σ_j s_j h_j

    w starts at zeros and γ at 1, so the initial mix is the plain mean of the
    inputs. The output has the inputs' shape; the first input's Keras mask
    passes through (all N inputs describe the same tokens).

    Weights, in `get_weights()` order: `scalar_weights (N,)` (w), `gamma ()`.

    Call arguments:
        inputs: a list (or tuple) of N >= 1 tensors of one shape.

    Returns:
        The mix, shaped like each input.

    Examples:
        >>> import keras
        >>> import numpy as np
        >>> mix = ScalarMix()
        >>> layers = [np.full((2, 5, 4), j, "float32") for j in range(3)]
        >>> y = keras.ops.convert_to_numpy(mix(layers))
        >>> y.shape, float(y[0, 0, 0])  # initially the mean of 0, 1, 2
        ((2, 5, 4), 1.0)
        >>> [tuple(w.shape) for w in mix.get_weights()]
        [(3,), ()]

    References:
        - Peters et al., 2018. Deep contextualized word representations.
          https://arxiv.org/abs/1802.05365
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def _check_shapes(self, shapes) -> None:
        """`shapes`: one shape per input, or a single tensor's shape (an error)."""
        expected = "a list of N >= 1 tensors of one shape"
        if shapes is None or (isinstance(shapes, (list, tuple)) and len(shapes) == 0):
            raise _validation.invalid_value(self, "inputs", expected, [])
        if not all(isinstance(shape, (list, tuple)) for shape in shapes):
            raise ArgumentTypeError(_validation.owner_name(self), f'invalid type for argument `inputs`: expected {expected}, received a single tensor of shape {tuple(shapes)}.')
        first = tuple(shapes[0])
        for j, shape in enumerate(shapes[1:], start=1):
            if len(shape) != len(first) or any(
                a is not None and b is not None and a != b for a, b in zip(shape, first)
            ):
                raise _validation.shape_error(
                    self, f"inputs[{j}]", f"the shape of `inputs[0]`, {first}", shape
                )
        if self.built and len(shapes) != self.scalar_weights.shape[0]:
            raise _validation.invalid_value(
                self,
                "inputs",
                f"a list of {self.scalar_weights.shape[0]} tensors (the number the layer "
                "was built with)",
                f"a list of {len(shapes)} tensors",
            )

    def build(self, input_shape):
        self._check_shapes(input_shape)
        self.scalar_weights = self.add_weight(
            name="scalar_weights",
            shape=(len(input_shape),),
            initializer="zeros",
            autocast=False,  # softmax(w) runs in float32 under mixed precision
        )
        self.gamma = self.add_weight(name="gamma", shape=(), initializer="ones")
        self.built = True

    def call(self, inputs):
        shapes = (
            [tuple(h.shape) for h in inputs]
            if isinstance(inputs, (list, tuple))
            else tuple(inputs.shape)
        )
        self._check_shapes(shapes)
        h = [_validation.float_inputs(self, h_j) for h_j in inputs]
        s = ops.cast(ops.softmax(self.scalar_weights), h[0].dtype)  # softmax(w), (N,)
        y = s[0] * h[0]
        for j in range(1, len(h)):
            y = y + s[j] * h[j]
        return self.gamma * y

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[0])

    def compute_mask(self, inputs, mask=None):
        if isinstance(mask, (list, tuple)):
            return mask[0] if mask else None
        return mask
