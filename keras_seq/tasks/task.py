"""`Task`: the base of keras-seq's tasks, a `keras.Model` for one job (KerasHub's shape)."""

from __future__ import annotations

import keras

__all__ = ["Task", "forget_calls"]


def forget_calls(*inputs) -> None:
    """Forgets the graph that a builder called its layers in, from ``inputs``
    (its `keras.Input`s): the layers keep the weights those calls built, in
    that order (a seed gives the weights it always gave), and the task's own
    graph, wired next, is each layer's one node, so that ``keras.Model(
    task.input, task.get_layer(name).output)`` reads the task's graph. A part
    that is a model (an encoder) keeps its own graph inside."""
    nodes, pending = [], [x._keras_history.operation for x in inputs]
    seen = set()
    while pending:
        operation = pending.pop()
        for node in operation._outbound_nodes:
            if id(node) not in seen:
                seen.add(id(node))
                nodes.append(node)
                pending.append(node.operation)
    for node in nodes:
        node.operation._inbound_nodes.remove(node)
        for tensor in node.arguments.keras_tensors:
            parent = tensor._keras_history.operation
            if parent is not None and node in parent._outbound_nodes:
                parent._outbound_nodes.remove(node)


class Task(keras.Model):
    """A `keras.Model` for one job, built from its parts, with its preprocessor.

    A task's constructor takes its parts (layers and models) and a few
    values, wires them into a functional model, and keeps each part as an
    attribute: the code that drives a task (decoding, export, training) asks
    it for its parts and its step, never looks a layer up by name. Its
    ``preprocessor`` (the tokenizer and lengths, labels or tags; None for a
    model built from ids alone) turns strings into the model's inputs and
    saves with the model as the ``.keras`` file's assets. The subclasses
    (`Seq2SeqLM`, `CausalLM`, `BidirectionalLM`, `TextClassifier`,
    `SequenceTagger`) name their parts in ``_PARTS`` and their other
    constructor values in ``_VALUES``: `get_config` and `from_config` read
    those, so a task saves and loads as one ``.keras`` file
    (``safe_mode=True``).
    """

    _PARTS: tuple[str, ...] = ()
    _VALUES: tuple[str, ...] = ()

    def __init__(self, *args, preprocessor=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.preprocessor = preprocessor

    def get_config(self) -> dict:
        config = {"name": self.name, "trainable": self.trainable}
        for name in self._PARTS:
            config[name] = keras.saving.serialize_keras_object(getattr(self, name))
        for name in self._VALUES:
            config[name] = getattr(self, name)
        config["preprocessor"] = keras.saving.serialize_keras_object(self.preprocessor)
        return config

    @classmethod
    def from_config(cls, config: dict):
        config = dict(config)
        for name in (*cls._PARTS, "preprocessor"):
            if config.get(name) is not None:
                config[name] = keras.saving.deserialize_keras_object(config[name])
        return cls(**config)

    def _require_preprocessor(self, method: str):
        """The preprocessor, or the error that says how to get one."""
        if self.preprocessor is None:
            from keras_seq._validation import ArgumentValueError

            raise ArgumentValueError(
                f"{type(self).__name__}.{method}", "this task has no preprocessor, so it "
                "takes token ids, not strings: pass `preprocessor=` when building it, or load "
                "a trained one (keras_seq.tasks.from_run, or a .keras file saved by a run)."
            )
        return self.preprocessor
