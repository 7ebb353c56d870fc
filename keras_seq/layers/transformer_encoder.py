"""Transformer encoder block (self-attention and feed-forward, each with add & norm)."""

from __future__ import annotations

import keras

from keras_seq.layers import _masking
from keras_seq.layers.multi_head_attention import MultiHeadAttention
from keras_seq.layers.positionwise_feed_forward import PositionwiseFeedForward


def _clone(initializer):
    # Each sub-layer needs its own initializer object, or seeded initializers
    # would give every kernel the same values.
    return initializer.__class__.from_config(initializer.get_config())


def _check_block_args(cls_name, intermediate_dim, num_heads, dropout, layer_norm_epsilon):
    for arg, value in (("intermediate_dim", intermediate_dim), ("num_heads", num_heads)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{cls_name}: `{arg}` must be a positive int. Received {value!r}.")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"{cls_name}: `dropout` must be in [0, 1). Received {dropout!r}.")
    if layer_norm_epsilon <= 0:
        raise ValueError(
            f"{cls_name}: `layer_norm_epsilon` must be > 0. Received {layer_norm_epsilon!r}."
        )


def _head_dim(cls_name, layer_name, hidden_dim, num_heads):
    if hidden_dim is None or hidden_dim % num_heads != 0:
        raise ValueError(
            f"{cls_name} '{layer_name}': `num_heads`={num_heads} must divide the model "
            f"width (the last axis of the input), which is {hidden_dim}."
        )
    return hidden_dim // num_heads


def _block_config(layer):
    return {
        "intermediate_dim": layer.intermediate_dim,
        "num_heads": layer.num_heads,
        "dropout": layer.dropout,
        "activation": keras.activations.serialize(layer.activation),
        "layer_norm_epsilon": layer.layer_norm_epsilon,
        "kernel_initializer": keras.initializers.serialize(layer.kernel_initializer),
        "bias_initializer": keras.initializers.serialize(layer.bias_initializer),
        "normalize_first": layer.normalize_first,
    }


def _check_width(layer_name, argument, tensor, width):
    if tensor.shape[-1] is not None and tensor.shape[-1] != width:
        raise ValueError(
            f"{layer_name}: `{argument}` must have {width} features (the width the layer "
            f"was built with). Received shape {tuple(tensor.shape)}."
        )


def _padding_attention_mask(layer_name, sequence, padding_mask, attention_mask, length):
    """`(B, 1|T, S)` mask from a `(B, S)` padding mask (explicit AND implicit)
    and a `(B, T, S)` attention mask; None when there is neither."""
    batch = sequence.shape[0]
    padding_mask = _masking.logical_and_masks(padding_mask, _masking.keras_mask(sequence))
    _masking.check_mask_shape(layer_name, "padding_mask", padding_mask, (batch, length))
    if attention_mask is not None:
        _masking.check_mask_shape(
            layer_name, "attention_mask", attention_mask, (batch, None, length), True
        )
    return _masking.merge_attention_masks(
        None, None, key_masks=(padding_mask,), attention_mask=attention_mask
    )


@keras.saving.register_keras_serializable(package="keras_seq")
class TransformerEncoder(keras.layers.Layer):
    """One Transformer encoder block, argument-compatible with KerasHub's.

    Post-norm (Vaswani et al. 2017, `normalize_first=False`):

        x = LayerNorm(x + Dropout(MultiHeadAttention(x, x)))
        y = LayerNorm(x + FFN(x))

    Pre-norm (`normalize_first=True`, as in GPT-2):

        x = x + Dropout(MultiHeadAttention(LN(x), LN(x)))
        y = x + FFN(LN(x))

    with FFN the `PositionwiseFeedForward` (dropout on its output) and
    `num_heads` heads of size `d / num_heads` (d = input width). Padding and
    attention masks are merged (logical AND), together with any implicit
    Keras mask of `inputs`; the mask passes through to the output.

    `get_weights()` order equals `keras_hub.layers.TransformerEncoder`'s (16
    arrays): self-attention query W/b, key W/b, value W/b, output W/b;
    self-attention LayerNorm γ/β; feed-forward LayerNorm γ/β; feed-forward
    intermediate W/b; feed-forward output W/b.

    Args:
        intermediate_dim: int, hidden width of the feed-forward network.
        num_heads: int, number of attention heads; must divide the input width.
        dropout: float, dropout rate of attention weights and sub-layer outputs.
        activation: activation of the feed-forward hidden layer (`"relu"`).
        layer_norm_epsilon: float, LayerNorm epsilon (1e-5).
        kernel_initializer: initializer of all kernels (`"glorot_uniform"`).
        bias_initializer: initializer of all biases (`"zeros"`).
        normalize_first: bool, pre-norm instead of post-norm (False).

    Call arguments:
        inputs: `(B, T, d)`.
        padding_mask: `(B, T)` boolean, True at real tokens.
        attention_mask: `(B, T, T)` boolean, True where query i may see key j.
        training: bool, enables dropout.
        return_attention_scores: also return the `(B, H, T, T)` weights.

    Example:

    ```python
    import numpy as np
    from keras_seq.layers import TransformerEncoder

    enc = TransformerEncoder(intermediate_dim=32, num_heads=2)
    x = np.random.rand(2, 6, 8).astype("float32")
    y = enc(x, padding_mask=np.array([[1] * 6, [1] * 4 + [0] * 2], bool))
    ```

    References:
        - Vaswani et al., 2017. Attention Is All You Need.
          https://arxiv.org/abs/1706.03762
        - Xiong et al., 2020. On Layer Normalization in the Transformer
          Architecture (pre-norm). https://arxiv.org/abs/2002.04745
    """

    def __init__(
        self,
        intermediate_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        activation="relu",
        layer_norm_epsilon: float = 1e-5,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        normalize_first: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        _check_block_args(
            "TransformerEncoder", intermediate_dim, num_heads, dropout, layer_norm_epsilon
        )
        self.intermediate_dim = intermediate_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.normalize_first = normalize_first
        self.supports_masking = True

    def _layer_norm(self, name, shape):
        norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )
        norm.build(shape)
        return norm

    def build(self, inputs_shape):
        hidden_dim = inputs_shape[-1]
        head_dim = _head_dim("TransformerEncoder", self.name, hidden_dim, self.num_heads)
        # Creation order fixes get_weights() order (KerasHub's).
        self._self_attention_layer = MultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=head_dim,
            dropout=self.dropout,
            kernel_initializer=_clone(self.kernel_initializer),
            bias_initializer=_clone(self.bias_initializer),
            dtype=self.dtype_policy,
            name="self_attention_layer",
        )
        self._self_attention_layer.build(query_shape=inputs_shape, value_shape=inputs_shape)
        self._self_attention_layer_norm = self._layer_norm(
            "self_attention_layer_norm", inputs_shape
        )
        self._self_attention_dropout = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="self_attention_dropout"
        )
        self._feedforward_layer_norm = self._layer_norm("feedforward_layer_norm", inputs_shape)
        self._feedforward = PositionwiseFeedForward(
            self.intermediate_dim,
            activation=self.activation,
            dropout=self.dropout,
            kernel_initializer=_clone(self.kernel_initializer),
            bias_initializer=_clone(self.bias_initializer),
            dtype=self.dtype_policy,
            name="feedforward",
        )
        self._feedforward.build(inputs_shape)
        self.built = True

    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        if len(inputs.shape) != 3:
            raise ValueError(
                f"TransformerEncoder '{self.name}': `inputs` must have shape "
                f"(batch, time, features). Received {tuple(inputs.shape)}."
            )
        _check_width(
            f"TransformerEncoder '{self.name}'",
            "inputs",
            inputs,
            self._feedforward_layer_norm.gamma.shape[0],
        )
        mask = _padding_attention_mask(
            f"TransformerEncoder '{self.name}'",
            inputs,
            padding_mask,
            attention_mask,
            inputs.shape[1],
        )
        x = inputs

        # Self-attention block.
        residual = x
        if self.normalize_first:
            x = self._self_attention_layer_norm(x)
        x, scores = self._self_attention_layer(
            x, x, attention_mask=mask, return_attention_scores=True, training=training
        )
        x = self._self_attention_dropout(x, training=training) + residual
        if not self.normalize_first:
            x = self._self_attention_layer_norm(x)

        # Feed-forward block.
        residual = x
        if self.normalize_first:
            x = self._feedforward_layer_norm(x)
        x = self._feedforward(x, training=training) + residual
        if not self.normalize_first:
            x = self._feedforward_layer_norm(x)
        return (x, scores) if return_attention_scores else x

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def compute_output_spec(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        outputs = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return outputs
        batch, length = inputs.shape[0], inputs.shape[1]
        scores_shape = (batch, self.num_heads, length, length)
        return outputs, keras.KerasTensor(scores_shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(_block_config(self))
        return config
