"""Transformer encoder block (self-attention and feed-forward, each with add & norm)."""

from __future__ import annotations

import keras

from keras_seq import _validation
from keras_seq.layers.attention import _transformer_block as block
from keras_seq.layers.quantization import SublayerQuantization


@keras.saving.register_keras_serializable(package="keras_seq")
class TransformerEncoder(SublayerQuantization, keras.layers.Layer):
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

    Examples:
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
        block.set_block_args(
            self, intermediate_dim, num_heads, dropout, activation, layer_norm_epsilon,
            kernel_initializer, bias_initializer, normalize_first,
        )
        self.supports_masking = True

    def build(self, inputs_shape):
        block.check_sequence(self, "inputs", inputs_shape)
        key_dim = block.head_dim(self, inputs_shape[-1], self.num_heads)
        # Creation order fixes get_weights() order (KerasHub's).
        self._self_attention_layer = block.make_attention(
            self, "self_attention_layer", key_dim, inputs_shape, inputs_shape
        )
        self._self_attention_layer_norm = block.make_layer_norm(
            self, "self_attention_layer_norm", inputs_shape
        )
        self._self_attention_dropout = block.make_dropout(self, "self_attention_dropout")
        self._feedforward_layer_norm = block.make_layer_norm(
            self, "feedforward_layer_norm", inputs_shape
        )
        self._feedforward = block.make_feedforward(self, inputs_shape)
        self.built = True

    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        width = self._feedforward_layer_norm.gamma.shape[0]
        block.check_sequence(self, "inputs", inputs.shape, width)
        mask = block.padding_attention_mask(
            self, inputs, padding_mask, attention_mask, inputs.shape[1]
        )
        x = _validation.float_inputs(self, inputs)  # after reading its Keras mask

        # Self-attention sub-layer.
        residual = x
        if self.normalize_first:
            x = self._self_attention_layer_norm(x)
        x, scores = self._self_attention_layer(
            x, x, attention_mask=mask, return_attention_scores=True, training=training
        )
        x = self._self_attention_dropout(x, training=training) + residual
        if not self.normalize_first:
            x = self._self_attention_layer_norm(x)

        x = block.feedforward_sublayer(
            x, self._feedforward_layer_norm, self._feedforward, self.normalize_first, training
        )
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
        config.update(block.block_config(self))
        return config
