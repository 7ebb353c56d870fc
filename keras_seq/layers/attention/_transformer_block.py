"""What `TransformerEncoder` and `TransformerDecoder` share: one home for both blocks.

Argument checks, the sub-layers both blocks create (with the names and in
the order that fix KerasHub's `get_weights()` layout), the padding-mask
merge and the feed-forward sub-layer. The names are public to the package
(no leading `_`); the module itself is private.
"""

from __future__ import annotations

import keras

from keras_seq import _validation
from keras_seq.layers.attention import _masking
from keras_seq.layers.attention.multi_head_attention import MultiHeadAttention
from keras_seq.layers.attention.positionwise_feed_forward import PositionwiseFeedForward


def set_block_args(
    layer, intermediate_dim, num_heads, dropout, activation, layer_norm_epsilon,
    kernel_initializer, bias_initializer, normalize_first,
) -> None:
    """Checks a Transformer block's constructor arguments and sets them on
    ``layer`` (the attributes `block_config` reads back)."""
    layer.intermediate_dim = _validation.check_positive_int(
        layer, "intermediate_dim", intermediate_dim
    )
    layer.num_heads = _validation.check_positive_int(layer, "num_heads", num_heads)
    layer.dropout = _validation.check_rate(layer, "dropout", dropout)
    layer.activation = _validation.check_activation(layer, "activation", activation)
    layer.layer_norm_epsilon = _validation.check_float(
        layer, "layer_norm_epsilon", layer_norm_epsilon, low=0.0, low_inclusive=False
    )
    layer.kernel_initializer = keras.initializers.get(kernel_initializer)
    layer.bias_initializer = keras.initializers.get(bias_initializer)
    layer.normalize_first = _validation.check_bool(layer, "normalize_first", normalize_first)


def block_config(layer) -> dict:
    """The `get_config()` entries of a Transformer block's own arguments."""
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


def clone_initializer(initializer):
    """A fresh copy: each sub-layer needs its own initializer object, or seeded
    initializers would give every kernel the same values."""
    return initializer.__class__.from_config(initializer.get_config())


def head_dim(layer, hidden_dim, num_heads) -> int:
    """`hidden_dim / num_heads`, or a ValueError if the heads do not divide the width."""
    if hidden_dim is None or hidden_dim % num_heads != 0:
        raise _validation.invalid_value(
            layer,
            "num_heads",
            f"a divisor of the model width (the last axis of the input), {hidden_dim}",
            num_heads,
        )
    return hidden_dim // num_heads


def make_attention(layer, name, key_dim, query_shape, value_shape) -> MultiHeadAttention:
    """A built attention sub-layer with the block's heads, dropout and initializers."""
    attention = MultiHeadAttention(
        num_heads=layer.num_heads,
        key_dim=key_dim,
        dropout=layer.dropout,
        kernel_initializer=clone_initializer(layer.kernel_initializer),
        bias_initializer=clone_initializer(layer.bias_initializer),
        dtype=layer.dtype_policy,
        name=name,
    )
    attention.build(query_shape=query_shape, value_shape=value_shape)
    return attention


def make_layer_norm(layer, name, shape) -> keras.layers.LayerNormalization:
    """A built LayerNormalization with the block's epsilon."""
    norm = keras.layers.LayerNormalization(
        epsilon=layer.layer_norm_epsilon, dtype=layer.dtype_policy, name=name
    )
    norm.build(shape)
    return norm


def make_dropout(layer, name) -> keras.layers.Dropout:
    return keras.layers.Dropout(layer.dropout, dtype=layer.dtype_policy, name=name)


def make_feedforward(layer, shape) -> PositionwiseFeedForward:
    """The built position-wise feed-forward sub-layer, named `feedforward`."""
    feedforward = PositionwiseFeedForward(
        layer.intermediate_dim,
        activation=layer.activation,
        dropout=layer.dropout,
        kernel_initializer=clone_initializer(layer.kernel_initializer),
        bias_initializer=clone_initializer(layer.bias_initializer),
        dtype=layer.dtype_policy,
        name="feedforward",
    )
    feedforward.build(shape)
    return feedforward


def check_sequence(layer, argument, shape, width=None) -> None:
    """A ValueError unless `shape` is `(batch, time, features)`: rank 3, with
    `features` known (in `build`, `width=None`) or equal to `width` (in `call`)."""
    shape = tuple(shape)
    if len(shape) != 3:
        raise _validation.shape_error(layer, argument, "rank 3 (batch, time, features)", shape)
    if width is None and shape[-1] is None:
        raise _validation.shape_error(
            layer, argument, "(batch, time, features) with a known feature size", shape
        )
    if width is not None and shape[-1] is not None and shape[-1] != width:
        raise _validation.shape_error(
            layer, argument, f"(batch, time, {width}) (the width the layer was built with)", shape
        )


def padding_attention_mask(layer, sequence, padding_mask, attention_mask, length):
    """`(B, 1|T, S)` mask from a `(B, S)` padding mask (explicit AND implicit)
    and a `(B, T, S)` attention mask; None when there is neither."""
    batch = sequence.shape[0]
    padding_mask = _masking.logical_and_masks(padding_mask, _masking.keras_mask(sequence))
    _masking.check_mask_shape(layer, "padding_mask", padding_mask, (batch, length))
    if attention_mask is not None:
        _masking.check_mask_shape(
            layer, "attention_mask", attention_mask, (batch, None, length), True
        )
    return _masking.merge_attention_masks(
        None, None, key_masks=(padding_mask,), attention_mask=attention_mask
    )


def feedforward_sublayer(x, norm, feedforward, normalize_first, training):
    """`LN(x + FFN(x))` (post-norm) or `x + FFN(LN(x))` (pre-norm)."""
    residual = x
    if normalize_first:
        x = norm(x)
    x = feedforward(x, training=training) + residual
    if not normalize_first:
        x = norm(x)
    return x
