"""Models saved by the release before tasks: plain functional models, read as tasks.

Before `keras_seq.tasks`, the builders of `keras_seq.models` returned plain
functional `keras.Model`s, and decoding and export found their parts by
layer name. Their ``.keras`` files still load (`keras.saving.load_model`
gives such a model back); `as_task` turns one into its task, sharing its
layers and weights, so that every command and every function that takes a
task takes it too. This module is the one place that knows the release's
layer names.
"""

from __future__ import annotations

import keras

__all__ = ["as_task"]


def as_task(model, where: str = "as_task"):
    """``model`` as a task: itself if it is one, else the task a model of the
    release's builders is (its layers and weights shared).

    Raises:
        TypeError: ``model`` is neither a task nor a model of those builders.
    """
    from keras_seq.tasks.task import Task

    if isinstance(model, Task):
        return model
    if isinstance(model, keras.Model) and getattr(model, "inputs", None):
        layers = {layer.name: layer for layer in model.layers}
        inputs = [t.name for t in model.inputs]
        for matches, build in _RELEASE_MODELS:
            if matches(inputs, layers):
                return build(model, layers)
    from keras_seq._validation import invalid_type

    raise invalid_type(where, "model", "a keras_seq.tasks task, or a model built by "
                       "keras_seq.models (any release)", model)


def _dropout(layers, name) -> float:
    layer = layers.get(name)
    return float(layer.rate) if layer is not None else 0.0


def _seq2seq(model, layers):
    from keras_seq.tasks.seq2seq_lm import Seq2SeqLM

    if "decoder" in layers:  # rnn_seq2seq
        return Seq2SeqLM(layers["encoder"], layers["target_embedding"], layers["decoder"],
                         output_layer=layers["logits"], dropout=_dropout(layers, "target_dropout"),
                         name=model.name)
    blocks = _numbered(layers, "decoder_layer_")
    logits = layers["logits"]
    return Seq2SeqLM(
        layers["encoder"], layers["target_embedding"], blocks,
        output_layer=None if isinstance(logits, keras.layers.Activation) else logits,
        target_position=layers["target_position"], final_norm=layers.get("decoder_final_norm"),
        dropout=_dropout(layers, "target_dropout"), name=model.name)


def _language_model(model, layers):
    from keras_seq.tasks.causal_lm import CausalLM

    logits = layers["logits"]
    output_layer = None if isinstance(logits, keras.layers.Activation) else logits
    if "token_embedding" in layers:  # the Transformer
        return CausalLM(layers["token_embedding"], _numbered(layers, "decoder_layer_"),
                        output_layer=output_layer, token_position=layers["token_position"],
                        dropout=_dropout(layers, "token_dropout"), name=model.name)
    return CausalLM(layers["embedding"], _numbered(layers, "recurrent_"),
                    output_layer=output_layer, final_norm=layers.get("final_norm"),
                    dropout=_dropout(layers, "dropout_0"), name=model.name)


def _bidirectional(model, layers):
    from keras_seq.tasks.bidirectional_lm import BidirectionalLM

    return BidirectionalLM(
        layers["token_embedding"], _numbered(layers, "forward_"), _numbered(layers, "backward_"),
        layers["softmax"], token_projection=layers.get("token_projection"),
        dropout=_dropout(layers, "forward_dropout_0"), name=model.name)


# A classifier's head: (its dropout, its logits), by builder.
_CLASSIFIER_HEADS = (("output_dropout", "logits"), ("class_dropout", "class_logits"),
                     ("dropout", "logits"))


def _classifier(model, layers):
    from keras_seq.tasks.text_classifier import TextClassifier

    for dropout, logits in _CLASSIFIER_HEADS:
        if dropout in layers and logits in layers:
            # The backbone is the graph up to the head: pooled already.
            backbone = keras.Model(model.inputs[0], layers[dropout].input, name="backbone")
            return TextClassifier(backbone, layers[logits].units, pooling=None,
                                  dropout=_dropout(layers, dropout),
                                  output_layer=layers[logits], name=model.name)
    raise AssertionError("checked by _is_classifier")


def _numbered(layers, prefix) -> list:
    found = []
    while f"{prefix}{len(found)}" in layers:
        found.append(layers[f"{prefix}{len(found)}"])
    return found


def _is_seq2seq(inputs, layers) -> bool:
    return {"encoder_inputs", "decoder_inputs"} <= set(inputs) and (
        {"encoder", "target_embedding", "logits"} <= set(layers)) and (
        "decoder" in layers or "decoder_layer_0" in layers)


def _is_language_model(inputs, layers) -> bool:
    return inputs == ["token_ids"] and "logits" in layers and (
        {"token_embedding", "token_position", "decoder_layer_0"} <= set(layers)
        or {"embedding", "recurrent_0"} <= set(layers))


def _is_bidirectional(inputs, layers) -> bool:
    return inputs == ["token_ids"] and {"token_embedding", "softmax", "forward_0",
                                        "backward_0"} <= set(layers)


def _is_classifier(inputs, layers) -> bool:
    return len(inputs) == 1 and any(d in layers and k in layers for d, k in _CLASSIFIER_HEADS)


_RELEASE_MODELS = ((_is_seq2seq, _seq2seq), (_is_language_model, _language_model),
                   (_is_bidirectional, _bidirectional), (_is_classifier, _classifier))


def release_preprocessor(task, config: dict, metrics: dict, tokenizer):
    """The preprocessor of a task from a run folder of the release (whose
    ``model.keras`` holds none): its tokenizer files and the lengths and
    labels its ``metrics.json`` records."""
    from keras_seq.tasks.bidirectional_lm import BidirectionalLM, BidirectionalLMPreprocessor
    from keras_seq.tasks.causal_lm import CausalLM, CausalLMPreprocessor
    from keras_seq.tasks.seq2seq_lm import Seq2SeqLM, Seq2SeqLMPreprocessor
    from keras_seq.tasks.text_classifier import TextClassifier, TextClassifierPreprocessor

    if isinstance(task, Seq2SeqLM):
        return Seq2SeqLMPreprocessor(tokenizer, int(config["source_length"]),
                                     int(config["target_length"]))
    if isinstance(task, CausalLM):
        return CausalLMPreprocessor(tokenizer, int(config["context"]))
    if isinstance(task, BidirectionalLM):
        return BidirectionalLMPreprocessor(tokenizer, int(config["context"]))
    if isinstance(task, TextClassifier):
        return TextClassifierPreprocessor(tokenizer, int(config["source_length"]),
                                          metrics["labels"])
    return None
