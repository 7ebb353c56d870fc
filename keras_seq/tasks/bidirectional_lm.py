"""`BidirectionalLM`: ELMo's forward and backward language models with one softmax."""

from __future__ import annotations

import keras
from keras import ops

from keras_seq.tasks.preprocessor import Preprocessor
from keras_seq.tasks.task import Task

__all__ = ["BidirectionalLM", "BidirectionalLMPreprocessor"]


@keras.saving.register_keras_serializable(package="keras_seq")
class BidirectionalLMPreprocessor(Preprocessor):
    """A biLM's strings: its tokenizer (characters or WordPiece) and its context."""


def _row_reversal(token_ids):
    """The gather indices that reverse the real tokens of each row in place.

    ``idx[b, t] = n_b − 1 − t`` for t < n_b (n_b: the row's real tokens,
    padding at the end only) and ``t`` for the padding, so
    ``take_along_axis(x, idx, axis=1)`` reads the row from its last real token
    and leaves the padding where it was. The map is its own inverse: the same
    indices put reversed outputs back in place. Built from keras.ops only (no
    static length needed), so it runs and reloads on every backend.
    """
    t = ops.cumsum(ops.ones_like(token_ids), axis=1) - 1  # (B, T): 0, 1, ..., T − 1
    n = ops.sum(ops.cast(ops.not_equal(token_ids, 0), "int32"), axis=1, keepdims=True)  # (B, 1)
    return ops.where(t < ops.cast(n, t.dtype), ops.cast(n, t.dtype) - 1 - t, t)


def _reverse_rows(x, idx):
    """``x (B, T)`` or ``(B, T, F)`` with each row's real steps reversed (see `_row_reversal`)."""
    if len(x.shape) == 3:
        idx = ops.expand_dims(idx, -1)  # (B, T, 1), broadcast over the features
    return ops.take_along_axis(x, idx, axis=1)


@keras.saving.register_keras_serializable(package="keras_seq")
class BidirectionalLM(Task):
    """ELMo's biLM: a forward and a backward recurrent language model with one softmax.

    ```
    x        = E[ids]                  (B, T, embedding_dim), 0 = padding
    x        = x W_p + b_p             (B, T, units), with a projection
    h→_j     = forward_j(h→_{j−1})     h→_0 = x, read left to right
    h←_j     = backward_j(h←_{j−1})    h←_0 = x, read from each row's last real token
    forward  = h→_L W_s + b_s          (B, T, V): predicts token t + 1 from tokens <= t
    backward = h←_L W_s + b_s          (B, T, V): predicts token t − 1 from tokens >= t
    ```

    Token ids are padded at the end of a row only. The backward stack reads
    each row reversed from its last real token (the padding is never read):
    the ids are reversed row by row, the backward layers run left to right
    over them with the padding mask, and their outputs are put back at the
    original positions. Both directions share the embedding (and projection)
    and the softmax. `models.bidirectional_language_model` builds it;
    `contextual_embedder` gives ELMo's representations of its layers.

    Args:
        token_embedding: the embedding (``mask_zero=True``).
        forward_layers: the forward stack's recurrent layers.
        backward_layers: the backward stack's, as many.
        softmax: the shared output layer (a ``Dense`` over the vocabulary).
        token_projection: a ``Dense(units)`` after the embedding, or None.
        dropout: float, on the input of every recurrent layer and the top
            outputs (no layer when 0).
        preprocessor: a `BidirectionalLMPreprocessor`, for strings.
    """

    _PARTS = ("token_embedding", "forward_layers", "backward_layers", "softmax",
              "token_projection")
    _VALUES = ("dropout",)

    def __init__(self, token_embedding, forward_layers, backward_layers, softmax,
                 token_projection=None, dropout: float = 0.0, preprocessor=None, **kwargs):
        from keras_seq._validation import check_rate, invalid_value

        dropout = check_rate("BidirectionalLM", "dropout", dropout)
        forward_layers, backward_layers = list(forward_layers), list(backward_layers)
        if len(forward_layers) != len(backward_layers) or not forward_layers:
            raise invalid_value("BidirectionalLM", "backward_layers",
                                f"{len(forward_layers)} layers, as many as forward_layers",
                                len(backward_layers))
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")

        def represent(ids):
            x = token_embedding(ids)
            return x if token_projection is None else token_projection(x)

        def stack(x, layers, direction):
            for i, layer in enumerate(layers):
                if dropout > 0:
                    x = keras.layers.Dropout(dropout, name=f"{direction}_dropout_{i}")(x)
                x = layer(x)
            if dropout > 0:
                x = keras.layers.Dropout(dropout, name=f"{direction}_output_dropout")(x)
            return x

        h_forward = stack(represent(token_ids), forward_layers, "forward")
        idx = _row_reversal(token_ids)
        h_backward = stack(represent(_reverse_rows(token_ids, idx)), backward_layers,
                           "backward")  # (B, T, units), rows reversed
        h_backward = _reverse_rows(h_backward, idx)  # back to the original positions
        logits = {"forward": softmax(h_forward), "backward": softmax(h_backward)}
        kwargs.setdefault("name", "bidirectional_language_model")
        super().__init__(inputs=token_ids, outputs=logits, preprocessor=preprocessor, **kwargs)
        self.token_embedding = token_embedding
        self.forward_layers = forward_layers
        self.backward_layers = backward_layers
        self.softmax = softmax
        self.token_projection = token_projection
        self.dropout = dropout

    def contextual_embedder(self) -> keras.Model:
        """The biLM's layer representations, stacked: ELMo's input to a task model.

        ```
        R_0 = [x; x]              the context-free token representation
        R_j = [h→_j; h←_j]        j = 1 … L, backward outputs at the original positions
        ```

        A `keras.Model` ``token_ids (B, T) -> (B, L + 1, T, 2·units)`` that
        reuses this model's layers and weights (no new weights, no dropout);
        see `keras_seq.models.contextual_embedder`.
        """
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")

        def represent(ids):
            x = self.token_embedding(ids)
            return x if self.token_projection is None else self.token_projection(x)

        idx = _row_reversal(token_ids)
        x = represent(token_ids)  # (B, T, units)
        representations = [ops.concatenate([x, x], axis=-1)]  # R_0, (B, T, 2·units)
        h_forward, h_backward = x, represent(_reverse_rows(token_ids, idx))
        for forward, backward in zip(self.forward_layers, self.backward_layers):
            h_forward = forward(h_forward)
            h_backward = backward(h_backward)  # reversed rows
            representations.append(
                ops.concatenate([h_forward, _reverse_rows(h_backward, idx)], axis=-1))
        r = ops.stack(representations, axis=1)  # (B, L + 1, T, 2·units)
        return keras.Model(token_ids, r, name="contextual_embedder")
