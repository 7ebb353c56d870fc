"""Metrics for sequence models: `Perplexity` of a language model."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq._validation import check_bool, check_int, shape_error
from keras_seq.layers.attention._masking import keras_mask

__all__ = ["Perplexity"]


@keras.saving.register_keras_serializable(package="keras_seq")
class Perplexity(keras.metrics.Metric):
    """Perplexity exp(mean cross-entropy) of next-token predictions, masked.

    Over everything seen since the last reset, with per-token weights w_i
    (the sample weights times the masks) and the predicted distribution p_i:

        perplexity = exp( Σ_i w_i · (−log p_i(y_i)) / Σ_i w_i )

    in nats (natural logarithm); the log of the result is the mean
    cross-entropy per token. The weights are the product of ``sample_weight``
    (broadcast to the targets' shape), the Keras mask carried by ``y_pred``
    (e.g. from ``Embedding(mask_zero=True)``) and, when ``mask_token_id`` is
    set, ``y_true != mask_token_id``. With no weight at all yet, the result is 1
    (zero loss), never NaN.

    Args:
        from_logits: bool, ``y_pred`` holds logits (True) or probabilities
            (False; normalised and clipped away from 0 as by
            `keras.losses.sparse_categorical_crossentropy`). Default True.
        mask_token_id: int or None, targets equal to this id get weight 0
            (e.g. 0, the padding id). Default None.
        name: str, metric name. Default ``"perplexity"``.
        dtype: the dtype of the metric's variables. Default float32.

    Call ``update_state(y_true, y_pred, sample_weight=None)`` with integer
    targets ``y_true`` of shape ``(B, T)`` (or any shape ``S``), predictions
    ``y_pred`` of shape ``S + (V,)`` and weights of shape ``S`` or a prefix of
    it (``(B,)`` weighs whole sequences).

    Examples:
        >>> import numpy as np
        >>> metric = Perplexity(mask_token_id=0)
        >>> y_true = np.array([[1, 2, 0]])
        >>> logits = np.zeros((1, 3, 4))  # uniform over 4 tokens
        >>> metric.update_state(y_true, logits)
        >>> round(float(metric.result()), 4)
        4.0

    References:
        Jelinek et al. Perplexity — a measure of the difficulty of speech
        recognition tasks. JASA 62, 1977.
    """

    def __init__(
        self,
        from_logits: bool = True,
        mask_token_id: int | None = None,
        name: str = "perplexity",
        dtype=None,
    ):
        super().__init__(name=name, dtype=dtype or "float32")
        self.from_logits = check_bool(self, "from_logits", from_logits)
        self.mask_token_id = (
            None if mask_token_id is None else check_int(self, "mask_token_id", mask_token_id)
        )
        self.total_loss = self.add_variable((), "zeros", dtype=self.dtype, name="total_loss")
        self.total_weight = self.add_variable((), "zeros", dtype=self.dtype, name="total_weight")

    def update_state(self, y_true, y_pred, sample_weight=None):
        mask = keras_mask(y_pred)
        y_true = ops.convert_to_tensor(y_true)
        y_pred = ops.convert_to_tensor(y_pred)
        if y_true.shape.rank is not None and y_pred.shape.rank is not None and (
            y_pred.shape.rank != y_true.shape.rank + 1
        ):
            raise shape_error(
                self, "y_pred", f"the shape of y_true {tuple(y_true.shape)} plus a vocabulary axis",
                y_pred.shape,
            )
        y_true = ops.cast(y_true, "int32")
        loss = keras.losses.sparse_categorical_crossentropy(
            y_true, ops.cast(y_pred, "float32"), from_logits=self.from_logits
        )  # (B, T)
        weight = ops.ones_like(loss)
        if sample_weight is not None:
            sample_weight = ops.cast(sample_weight, "float32")
            while len(sample_weight.shape) < len(loss.shape):
                sample_weight = ops.expand_dims(sample_weight, -1)
            weight = weight * sample_weight
        if mask is not None:
            weight = weight * ops.cast(mask, "float32")
        if self.mask_token_id is not None:
            weight = weight * ops.cast(ops.not_equal(y_true, self.mask_token_id), "float32")
        # A masked position may hold any value (even a non-finite one): it is
        # selected away, not multiplied by zero.
        loss = ops.where(weight > 0, loss, 0.0)
        self.total_loss.assign_add(ops.cast(ops.sum(loss * weight), self.dtype))
        self.total_weight.assign_add(ops.cast(ops.sum(weight), self.dtype))

    def result(self):
        mean = ops.divide_no_nan(self.total_loss, self.total_weight)
        return ops.exp(mean)

    def reset_state(self):
        self.total_loss.assign(0.0)
        self.total_weight.assign(0.0)

    def get_config(self):
        return {
            "name": self.name,
            "dtype": self.dtype,
            "from_logits": self.from_logits,
            "mask_token_id": self.mask_token_id,
        }
