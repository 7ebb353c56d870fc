"""The Dynamic Convolutional Neural Network of Kalchbrenner et al. (2014)."""

from __future__ import annotations

from collections.abc import Sequence

import keras

from keras_seq import _validation
from keras_seq.layers import DynamicKMaxPooling, Folding, WideConvolution1D
from keras_seq.layers.convolutional._top_features import TopFeatures
from keras_seq.tasks import TextClassifier


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
    ``kernel_sizes[l]`` into ``filters[l]`` feature maps
    (`keras_seq.layers.WideConvolution1D`, each row on its own), folding of
    neighbouring rows where ``folding[l]`` (`keras_seq.layers.Folding`),
    dynamic k-max pooling
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
        A `keras_seq.tasks.TextClassifier` ``token_ids (B, T) -> logits (B, num_classes)``
        (its backbone, ``"dcnn"``, gives the top features).

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
    x = TopFeatures(name="top_features")(x)  # (B, k_top * n * d')
    return TextClassifier(keras.Model(token_ids, x, name="dcnn"), num_classes, pooling=None,
                          dropout=dropout, name=name)
