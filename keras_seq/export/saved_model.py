"""SavedModel: strings in, strings out, for TF Serving or plain TensorFlow
(translators: `export_saved_model`; the tasks that read a text in one pass,
classifiers and taggers: `export_strings_saved_model`)."""

from __future__ import annotations

import os

import tensorflow as tf

from keras_seq._backend import EXPORT_THERE, require_tensorflow
from keras_seq._validation import (
    ArgumentValueError,
    check_float,
    check_positive_int,
)
from keras_seq.export._checks import check_seq2seq, check_tokenizer


class _ModelModule(tf.Module):
    """A module that runs a Keras model and saves only the model's variables:
    tracking the model would also save its optimizer state (three times the
    weights with Adam)."""

    def __init__(self, model, name):
        super().__init__(name=name)
        object.__setattr__(self, "model", model)
        self.model_variables = list(model.variables)

    def write(self, function, directory) -> str:
        """Writes the module with ``function`` (a `tf.function` with an
        ``input_signature``) as its ``serving_default`` signature.

        The function itself, not its concrete function, is the signature:
        for a method of the module (the translator's), a concrete function
        taken first was traced again by the save (0.6 of 1.4 CPU-s).
        """
        directory = os.fspath(directory)
        tf.saved_model.save(self, directory, signatures={"serving_default": function})
        return directory


class _Translator(_ModelModule):
    """Tokenizers + model + decoding as one module with a string signature."""

    def __init__(
        self,
        model,
        source_tokenizer,
        target_tokenizer,
        source_length,
        target_length,
        beam_width,
        length_penalty,
    ):
        super().__init__(model, name="translator")
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self._source_length = source_length
        self._target_length = target_length
        self._beam_width = beam_width
        self._length_penalty = length_penalty

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")],
                 autograph=False)
    def translate(self, inputs):
        from keras_seq import decoding

        # The signature's (None,) shape is not enforced on a loaded model: a
        # scalar or a (B, 1) batch would otherwise be tokenized as a batch.
        inputs = tf.ensure_shape(inputs, [None], name="inputs_must_be_a_rank_1_batch")
        source_ids = self.source_tokenizer.encode(inputs, self._source_length)
        if self._beam_width == 1:
            ids = decoding.greedy_decode(self.model, source_ids, self._target_length)
        else:
            ids, _ = decoding.beam_search(
                self.model,
                source_ids,
                self._target_length,
                self._beam_width,
                self._length_penalty,
            )
        return {"outputs": self.target_tokenizer.detokenize(ids), "output_ids": ids}


def export_saved_model(
    model,
    source_tokenizer,
    target_tokenizer,
    directory: str | os.PathLike,
    source_length: int,
    target_length: int,
    beam_width: int = 1,
    length_penalty: float = 0.0,
) -> str:
    """Writes a SavedModel that translates raw strings, for TF Serving.

    The ``serving_default`` signature takes ``inputs``, a ``(B,)`` tf.string
    tensor (any other rank is an ``InvalidArgumentError`` naming ``inputs``
    and the expected shape ``[?]``), and returns ``outputs`` (``(B,)`` tf.string, the translations) and
    ``output_ids`` (``(B, target_length)`` int32). Inside: ``source_tokenizer.encode``
    (truncated and padded to ``source_length``) -> `keras_seq.decoding.greedy_decode`
    (``beam_width=1``) or `keras_seq.decoding.beam_search` -> ``target_tokenizer.detokenize``.
    With `text.CharTokenizer`s the graph holds core TensorFlow ops only; a
    `text.WordPieceTokenizer` adds tensorflow-text ops (load them with
    ``import tensorflow_text`` before `tf.saved_model.load`). A Transformer's
    key/value cache is written with core ops (no ``Xla*`` op);
    `saved_model_op_names` lists the ops a server needs.

    Args:
        model: a model built by `models.rnn_seq2seq` or `models.transformer_seq2seq`.
        source_tokenizer: tokenizer of the inputs.
        target_tokenizer: tokenizer of the outputs.
        directory: where to write. For TF Serving this is a version folder,
            ``<model base path>/<version>``, e.g. ``models/translator/1``.
        source_length: source ids per input (longer inputs are truncated).
        target_length: output buffer length, ``[END]`` included.
        beam_width: 1 for greedy decoding, else the beam width.
        length_penalty: GNMT length penalty α of the beam search.

    Returns:
        ``directory`` as a string.

    Examples:
        >>> import os, tempfile
        >>> from keras_seq import models, text
        >>> tokenizer = text.CharTokenizer.from_corpus(["21 Nov 2026", "2026-11-21"])
        >>> model = models.rnn_seq2seq(tokenizer.vocabulary_size, tokenizer.vocabulary_size,
        ...                            units=8, embedding_dim=4)
        >>> directory = os.path.join(tempfile.mkdtemp(), "translator", "1")
        >>> path = export_saved_model(model, tokenizer, tokenizer, directory, 16, 12)
        >>> serve = tf.saved_model.load(path).signatures["serving_default"]
        >>> serve(inputs=tf.constant(["21 Nov 2026"]))["outputs"].shape
        TensorShape([1])
    """
    require_tensorflow("keras_seq.export.export_saved_model", EXPORT_THERE)
    where = "export_saved_model"
    check_seq2seq(where, model)
    check_tokenizer(where, "source_tokenizer", source_tokenizer)
    check_tokenizer(where, "target_tokenizer", target_tokenizer)
    source_length = check_positive_int(where, "source_length", source_length)
    target_length = check_positive_int(where, "target_length", target_length)
    beam_width = check_positive_int(where, "beam_width", beam_width)
    length_penalty = check_float(where, "length_penalty", length_penalty, low=0.0)
    logits_size = model.output.shape[-1]
    if target_tokenizer.vocabulary_size > logits_size:
        raise ArgumentValueError(where, f'`target_tokenizer` has {target_tokenizer.vocabulary_size} tokens but the model predicts only {logits_size}; was the model trained with another vocabulary?')
    translator = _Translator(
        model,
        source_tokenizer,
        target_tokenizer,
        int(source_length),
        int(target_length),
        int(beam_width),
        float(length_penalty),
    )
    return translator.write(translator.translate, directory)


def export_strings_saved_model(model, serve, directory: str | os.PathLike, name: str,
                               resources=()) -> str:
    """Writes a SavedModel whose ``serving_default`` runs ``serve`` on strings.

    The one SavedModel writer of the tasks that map texts to outputs in one
    pass (a classifier, a tagger): its signature takes ``inputs``, a ``(B,)``
    tf.string tensor (any other rank is an ``InvalidArgumentError`` naming
    ``inputs``), and returns ``serve(inputs)``, a dict of tensors. Only
    ``model``'s variables are saved (no optimizer state).

    Args:
        model: the Keras model ``serve`` runs.
        serve: a function of the ``(B,)`` strings to a dict of output tensors,
            in TensorFlow ops.
        directory: where to write; for TF Serving a version folder.
        name: the module's name.
        resources: TensorFlow resources ``serve`` reads (lookup tables, a
            tokenizer module), saved with it.

    Returns:
        ``directory`` as a string.
    """
    module = _ModelModule(model, name=name)
    module.resources = list(resources)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")],
                 autograph=False)
    def serving(inputs):
        # The signature's (None,) shape is not enforced on a loaded model: a
        # scalar or a (B, 1) batch would otherwise be read as a batch.
        return serve(tf.ensure_shape(inputs, [None], name="inputs_must_be_a_rank_1_batch"))

    return module.write(serving, directory)


def export_classifier_saved_model(
    model,
    tokenizer,
    labels,
    directory: str | os.PathLike,
    source_length: int,
) -> str:
    """Writes a SavedModel that classifies raw strings, for TF Serving.

    The ``serving_default`` signature takes ``inputs``, a ``(B,)`` tf.string
    tensor (any other rank is an ``InvalidArgumentError``), and returns
    ``labels`` (``(B,)`` tf.string, the most probable label of each text)
    and ``probabilities`` (``(B, classes)`` float32, the softmax of the
    logits, classes in ``labels`` order). Inside: the text's first
    ``source_length`` tokens (`keras_seq.data.classification_ids`) -> the
    model -> softmax. A `text.WordPieceTokenizer` adds tensorflow-text ops
    (``import tensorflow_text`` before `tf.saved_model.load`).

    Args:
        model: a classifier ``token_ids (B, T) -> logits (B, classes)``
            (`models.sequence_classifier`, `models.classifier_from_language_model`).
        tokenizer: the tokenizer it was trained with.
        labels: the class names, in class id order.
        directory: where to write; for TF Serving a version folder,
            ``<model base path>/<version>``, e.g. ``models/classifier/1``.
        source_length: the most tokens read of a text.

    Returns:
        ``directory`` as a string.

    Examples:
        >>> import os, tempfile
        >>> from keras_seq import models, text
        >>> tokenizer = text.CharTokenizer.from_corpus(["good", "bad"])
        >>> model = models.sequence_classifier(tokenizer.vocabulary_size, 2, units=4)
        >>> directory = os.path.join(tempfile.mkdtemp(), "classifier", "1")
        >>> path = export_classifier_saved_model(model, tokenizer, ["bad", "good"], directory, 32)
        >>> serve = tf.saved_model.load(path).signatures["serving_default"]
        >>> serve(inputs=tf.constant(["good", "bad"]))["probabilities"].shape
        TensorShape([2, 2])
    """
    require_tensorflow("keras_seq.export.export_classifier_saved_model", EXPORT_THERE)
    where = "export_classifier_saved_model"
    check_tokenizer(where, "tokenizer", tokenizer)
    source_length = check_positive_int(where, "source_length", source_length)
    labels = [str(label) for label in labels]
    outputs = model.outputs
    if len(outputs) != 1 or len(outputs[0].shape) != 2 or outputs[0].shape[-1] != len(labels):
        raise ArgumentValueError(where, f'`model` must return logits (B, classes) with one class per label ({len(labels)}); its outputs are {[tuple(o.shape) for o in outputs]}.')
    names = tf.constant(labels, tf.string)

    def classify(inputs):
        from keras_seq.data import classification_ids

        ids = classification_ids(tokenizer, inputs, source_length)
        probabilities = tf.nn.softmax(tf.cast(model(ids, training=False), tf.float32))
        return {"labels": tf.gather(names, tf.argmax(probabilities, axis=-1)),
                "probabilities": probabilities}

    return export_strings_saved_model(model, classify, directory, "classifier", [tokenizer])


def saved_model_op_names(directory: str | os.PathLike) -> set[str]:
    """Names of every op in a SavedModel's graph and its functions (loop bodies included).

    What a server must have registered to load it: core TensorFlow ops,
    tensorflow-text ops (``FastWordpieceTokenizeWithOffsets``, ...) for a
    WordPiece tokenizer, and ``Xla*`` ops, which TF Serving runs only with
    ``--xla_cpu_compilation_enabled=true`` on CPU.
    """
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(os.fspath(directory), "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    names = set()
    for meta_graph in saved_model.meta_graphs:
        names.update(node.op for node in meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            names.update(node.op for node in function.node_def)
    return names
