"""k-max pooling over time, static and dynamic (Kalchbrenner et al. 2014, §3.3-3.4)."""

from __future__ import annotations

import keras

from keras_seq import _validation
from keras_seq.layers.convolutional import k_max_backend as _k_max


def _k(k_top: int, layer_index: int, num_layers: int, s):
    """max(k_top, ⌈(L − l)·s / L⌉) in integers, for an int, an int32 tensor or None
    (an unknown length: None, except at the top layer)."""
    if layer_index == num_layers:
        return k_top  # static, whatever the length
    if s is None:
        return None
    ceiling = ((num_layers - layer_index) * s + num_layers - 1) // num_layers
    if isinstance(s, int):
        return max(k_top, ceiling)
    return keras.ops.maximum(k_top, ceiling)


@keras.saving.register_keras_serializable(package="keras_seq")
class _KMaxOutputMask(keras.Operation):
    """The output mask of a k-max pooling, as an operation of its own.

    Its length depends on the input's (dynamic) length, which no built-in
    op expresses; a functional model records this operation in its graph,
    so the mask reaches the next layer.
    """

    def __init__(self, k_top: int, layer_index: int, num_layers: int, name=None):
        super().__init__(name=name)
        self.k_top, self.layer_index, self.num_layers = k_top, layer_index, num_layers

    def call(self, inputs, mask):
        k_out = _k(self.k_top, self.layer_index, self.num_layers, keras.ops.shape(inputs)[1])
        lengths = keras.ops.sum(keras.ops.cast(mask, "int32"), axis=1)
        k = _k(self.k_top, self.layer_index, self.num_layers, lengths)
        return _k_max.output_mask(mask, k_out, k)

    def compute_output_spec(self, inputs, mask):
        k = _k(self.k_top, self.layer_index, self.num_layers, inputs.shape[1])
        return keras.KerasTensor((inputs.shape[0], k), dtype="bool")

    def get_config(self):
        return {"k_top": self.k_top, "layer_index": self.layer_index,
                "num_layers": self.num_layers, "name": self.name}


class _KMaxPoolingBase(keras.layers.Layer):
    """What both poolings share: the dynamic k of §3.4 with (k_top, l, L).

    `KMaxPooling(k)` is the case l = L = 1, where k = k_top = k.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def k_formula(self) -> tuple[int, int, int]:
        """``(k_top, layer_index, num_layers)``."""
        raise NotImplementedError

    def build(self, inputs_shape):
        if len(inputs_shape) < 3 or any(d is None for d in inputs_shape[2:]):
            raise _validation.shape_error(
                self, "inputs", "(batch, time, features...) with known feature axes",
                inputs_shape,
            )
        self.built = True

    def _check_mask(self, inputs, mask):
        if mask is not None and (len(mask.shape) != 2 or (
            None not in (mask.shape[1], inputs.shape[1]) and mask.shape[1] != inputs.shape[1]
        )):
            raise _validation.shape_error(
                self, "mask", f"(batch, time) with time = {inputs.shape[1]}", mask.shape
            )

    def call(self, inputs, mask=None):
        self._check_mask(inputs, mask)
        k_out = _k(*self.k_formula(), keras.ops.shape(inputs)[1])
        k = None
        if mask is not None:
            lengths = keras.ops.sum(keras.ops.cast(mask, "int32"), axis=1)  # s per sequence
            k = _k(*self.k_formula(), lengths)
        return _k_max.k_max_over_time(inputs, mask, k_out, k)

    def compute_output_shape(self, inputs_shape):
        return (inputs_shape[0], _k(*self.k_formula(), inputs_shape[1]), *inputs_shape[2:])

    def compute_mask(self, inputs, mask=None):
        if mask is None:
            return None
        self._check_mask(inputs, mask)
        return _KMaxOutputMask(*self.k_formula(), name=f"{self.name}_mask")(inputs, mask)


@keras.saving.register_keras_serializable(package="keras_seq")
class KMaxPooling(_KMaxPoolingBase):
    """k-max pooling over time (Kalchbrenner et al. 2014, §3.3).

    For each sequence and each feature, the ``k`` largest values over the
    time axis, kept in their original time order:

        out[b, :, f] = x[b, t_1, f], ..., x[b, t_k, f]   with t_1 < ... < t_k
                       the steps of the k largest x[b, t, f]

    ``(B, T, d)`` becomes ``(B, k, d)`` (any further feature axes are pooled
    alike: ``(B, T, *F)`` becomes ``(B, k, *F)``). Among equal values the
    earlier step wins. Masked steps are never chosen; a sequence with fewer
    than ``k`` valid steps (or ``T < k``) gets its valid steps followed by
    zeros, and, when an input mask is given, the output mask ``(B, k)`` is
    False at those zeros.

    Args:
        k: int, the number of steps kept (>= 1).

    Examples:
        >>> import numpy as np
        >>> x = np.array([[[1.], [5.], [2.], [5.], [3.]]], "float32")   # (1, 5, 1)
        >>> KMaxPooling(3)(x)[0, :, 0].numpy()     # 5, 5, 3 in time order
        array([5., 5., 3.], dtype=float32)
        >>> mask = np.array([[True, False, True, True, True]])
        >>> KMaxPooling(3)(x, mask=mask)[0, :, 0].numpy()
        array([2., 5., 3.], dtype=float32)

    References:
        Kalchbrenner, Grefenstette, Blunsom. A Convolutional Neural Network
        for Modelling Sentences. ACL 2014. https://arxiv.org/abs/1404.2188
    """

    def __init__(self, k: int, **kwargs):
        super().__init__(**kwargs)
        self.k = _validation.check_positive_int(self, "k", k)

    def k_formula(self):
        return self.k, 1, 1

    def get_config(self):
        config = super().get_config()
        config.update({"k": self.k})
        return config


@keras.saving.register_keras_serializable(package="keras_seq")
class DynamicKMaxPooling(_KMaxPoolingBase):
    """k-max pooling whose k follows the sequence length (Kalchbrenner et al. 2014, §3.4).

    Layer ``l`` of ``L`` convolutional layers keeps

        k_l = max(k_top, ⌈(L − l) · s / L⌉)

    steps of a sequence of ``s`` valid steps (computed exactly in integers:
    ⌈a / L⌉ = (a + L − 1) // L), chosen as `KMaxPooling` chooses them (the
    largest values per feature, in time order, the earlier step on ties,
    masked steps never). Each sequence uses its own ``s``, its number of
    unmasked steps (``T`` without a mask). The output's time length is the
    formula with ``s = T``, the padded length, so every sequence of a padded
    batch gets what it gets alone, followed by zeros that the output mask
    marks False. A dynamic ``T`` gives a dynamic output length. At the top
    layer (``l = L``) k is ``k_top``.

    Args:
        k_top: int, the k of the top pooling layer and the smallest k (>= 1).
        layer_index: int, l, this layer's 1-based position among the
            convolutional layers (1 <= l <= ``num_layers``).
        num_layers: int, L, the number of convolutional layers (>= 1).

    Examples:
        >>> import numpy as np
        >>> pool = DynamicKMaxPooling(k_top=2, layer_index=1, num_layers=3)
        >>> x = np.arange(7, dtype="float32").reshape(1, 7, 1)   # s = 7: k = ceil(2 * 7 / 3) = 5
        >>> pool(x)[0, :, 0].numpy()
        array([2., 3., 4., 5., 6.], dtype=float32)
        >>> mask = np.array([[True] * 3 + [False] * 4])             # s = 3: k = max(2, 2) = 2
        >>> pool(x, mask=mask)[0, :, 0].numpy(), pool.compute_mask(x, mask)[0].numpy()
        (array([1., 2., 0., 0., 0.], dtype=float32), array([ True,  True, False, False, False]))

    References:
        Kalchbrenner, Grefenstette, Blunsom. A Convolutional Neural Network
        for Modelling Sentences. ACL 2014. https://arxiv.org/abs/1404.2188
    """

    def __init__(self, k_top: int, layer_index: int, num_layers: int, **kwargs):
        super().__init__(**kwargs)
        self.k_top = _validation.check_positive_int(self, "k_top", k_top)
        self.num_layers = _validation.check_positive_int(self, "num_layers", num_layers)
        self.layer_index = _validation.check_int(
            self, "layer_index", layer_index, minimum=1, maximum=self.num_layers
        )

    def k_formula(self):
        return self.k_top, self.layer_index, self.num_layers

    def get_config(self):
        config = super().get_config()
        config.update(
            {"k_top": self.k_top, "layer_index": self.layer_index, "num_layers": self.num_layers}
        )
        return config
