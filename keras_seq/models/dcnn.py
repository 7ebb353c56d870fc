"""The Dynamic Convolutional Neural Network of Kalchbrenner et al. (2014)."""

from __future__ import annotations

from collections.abc import Sequence

import keras
from keras import ops

from keras_seq import _validation
from keras_seq.layers import DynamicKMaxPooling, Folding


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


@keras.saving.register_keras_serializable(package="keras_seq")
class _TopFeatures(keras.layers.Flatten):
    """`Flatten` that takes the top pooling's mask and drops it: the steps it
    marks already hold zeros, and a mask on the logits would reach the loss."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def compute_mask(self, inputs, mask=None):
        return None


def _check_ints(where: str, argument: str, values) -> list[int]:
    if isinstance(values, str) or not isinstance(values, Sequence) or not values:
        raise _validation.invalid_type(
            where, argument, "a non-empty sequence of positive integers", values
        )
    return [_validation.check_positive_int(where, f"{argument}[{i}]", v)
            for i, v in enumerate(values)]


def dcnn_classifier(
    vocabulary_size: int,
    num_classes: int,
    embedding_dim: int = 48,
    filters: Sequence[int] = (6, 14),
    kernel_sizes: Sequence[int] = (7, 5),
    k_top: int = 4,
    folding: Sequence[bool] | None = None,
    dropout: float = 0.5,
    name: str = "dcnn_classifier",
) -> keras.Model:
    """The Dynamic Convolutional Neural Network (DCNN) of Kalchbrenner et al. 2014.

    Token ids → embedding (the sentence matrix, ``embedding_dim`` rows) →
    for each convolutional layer l = 1 … L: a wide convolution of width
    ``kernel_sizes[l]`` into ``filters[l]`` feature maps (`WideConvolution1D`,
    each row on its own), folding of neighbouring rows where ``folding[l]``
    (`keras_seq.layers.Folding`), dynamic k-max pooling
    (`keras_seq.layers.DynamicKMaxPooling` with k_l = max(k_top,
    ⌈(L − l)·s / L⌉); the top layer keeps ``k_top`` steps) and tanh → the
    ``k_top × maps × rows`` top features, flattened → dropout → a linear
    layer over the classes.

    The defaults are the paper's binary sentiment network: d = 48, two
    layers of widths 7 and 5 with 6 and 14 maps, k_top = 4, folding in the
    last layer, dropout 0.5 at the penultimate layer. Padding (id 0) is
    masked throughout: each pooling layer's s is the number of valid steps of
    its own input (the previous wide convolution's output, s + m − 1 for a
    sentence of s tokens), so a padded batch gives every sentence the logits
    it gets alone.

    Args:
        vocabulary_size: int, number of token ids (0 = padding).
        num_classes: int, number of classes.
        embedding_dim: int, d, the rows of the sentence matrix; must be
            divisible by 2 for every folding layer. Default 48.
        filters: feature maps of each convolutional layer. Default ``(6, 14)``.
        kernel_sizes: filter width m of each layer, as many as ``filters``.
            Default ``(7, 5)``.
        k_top: int, steps kept by the top pooling layer. Default 4.
        folding: one bool per layer, fold after that layer's convolution.
            Default None: the last layer only.
        dropout: float, dropout rate on the top features. Default 0.5.
        name: model name.

    Returns:
        A `keras.Model` ``token_ids (B, T) -> logits (B, num_classes)``.

    Examples:
        >>> model = dcnn_classifier(30, 3, embedding_dim=8, filters=(2, 3), kernel_sizes=(3, 2))
        >>> tuple(model(keras.ops.ones((2, 5), "int32")).shape)
        (2, 3)

    References:
        Kalchbrenner, Grefenstette, Blunsom. A Convolutional Neural Network
        for Modelling Sentences. ACL 2014. https://arxiv.org/abs/1404.2188
    """
    where = "dcnn_classifier"
    vocabulary_size = _validation.check_positive_int(where, "vocabulary_size", vocabulary_size)
    num_classes = _validation.check_positive_int(where, "num_classes", num_classes)
    embedding_dim = _validation.check_positive_int(where, "embedding_dim", embedding_dim)
    filters = _check_ints(where, "filters", filters)
    kernel_sizes = _check_ints(where, "kernel_sizes", kernel_sizes)
    if len(kernel_sizes) != len(filters):
        raise _validation.invalid_value(
            where, "kernel_sizes", f"{len(filters)} widths, one per entry of `filters`",
            kernel_sizes,
        )
    num_layers = len(filters)
    k_top = _validation.check_positive_int(where, "k_top", k_top)
    if folding is None:
        folding = [False] * (num_layers - 1) + [True]
    if isinstance(folding, str) or not isinstance(folding, Sequence):
        raise _validation.invalid_type(where, "folding", "a sequence of bools or None", folding)
    folding = [_validation.check_bool(where, f"folding[{i}]", f) for i, f in enumerate(folding)]
    if len(folding) != num_layers:
        raise _validation.invalid_value(
            where, "folding", f"{num_layers} bools, one per entry of `filters`", folding
        )
    if embedding_dim % 2 ** sum(folding):
        raise _validation.invalid_value(
            where, "embedding_dim", f"a multiple of {2 ** sum(folding)} "
            f"({sum(folding)} folding layer(s) each halve it)", embedding_dim,
        )
    dropout = _validation.check_rate(where, "dropout", dropout)

    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    x = keras.layers.Embedding(
        vocabulary_size, embedding_dim, mask_zero=True, name="embedding"
    )(token_ids)  # (B, T, d)
    for layer, (n, m, fold) in enumerate(zip(filters, kernel_sizes, folding), start=1):
        x = WideConvolution1D(n, m, name=f"wide_convolution_{layer}")(x)  # (B, T + m - 1, n, d)
        if fold:
            x = Folding(name=f"folding_{layer}")(x)  # (B, T', n, d / 2)
        # (B, k_l, n, d'), k_l = max(k_top, ceil((L - l) s / L)) with l = layer
        x = DynamicKMaxPooling(k_top, layer, num_layers, name=f"k_max_pooling_{layer}")(x)
        x = keras.layers.Activation("tanh", name=f"tanh_{layer}")(x)
    x = _TopFeatures(name="top_features")(x)  # (B, k_top * n * d')
    x = keras.layers.Dropout(dropout, name="dropout")(x)
    logits = keras.layers.Dense(num_classes, dtype="float32", name="logits")(x)
    return keras.Model(token_ids, logits, name=name)
