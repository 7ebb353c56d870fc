"""Export: SavedModel (strings in, strings out), TFLite with builtin ops only, ONNX.

This is the one export module of the package.

- `export_saved_model` writes a SavedModel whose ``serving_default`` signature
  maps a ``(B,)`` string tensor to ``(B,)`` strings: tokenize -> greedy or beam
  decoding -> detokenize, all TensorFlow ops, so TF Serving (or plain
  ``tf.saved_model.load``) runs it without this package;
  `saved_model_op_names` lists the ops a server must provide.
- `convert_to_tflite` converts any model or function with TFLite builtin ops
  only; `convert_seq2seq_to_tflite` converts a translation model's teacher-forced
  forward pass, and `convert_decoder_steps_to_tflite` an encoder plus a single
  decoder step with explicit state, for a greedy loop on the device
  (`tflite_greedy_decode` is that loop, in NumPy).
- `convert_to_onnx` converts any model or function through tf2onnx;
  `convert_seq2seq_to_onnx` a translation model's forward pass and
  `convert_decoder_steps_to_onnx` its encoder and decoder step.
- `export_run` exports a ``keras-seq train`` run folder in any of these formats.

Recurrent loops are traced in their TFLite-builtin form (``builtin_loop_mode``)
while converting, so no Flex delegate is needed.
"""

from __future__ import annotations

import json
import numbers
import os
import warnings
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from keras_seq.layers._recurrent_driver import builtin_loop_mode


def _as_specs(model, input_signature):
    if input_signature is not None:
        return list(input_signature)
    specs = []
    for t in model.inputs:
        # Batch and time stay dynamic; feature sizes are fixed by the weights.
        shape = [None] + list(t.shape[1:])
        if len(shape) >= 2:
            shape[1] = None
        specs.append(tf.TensorSpec(shape, tf.as_dtype(t.dtype), name=t.name.split(":")[0]))
    return specs


def _traceable(model, input_signature):
    """The function to trace and its input specs, for a model or a callable."""
    specs = _as_specs(model, input_signature)
    if input_signature is None:

        def call(*args):
            # `model.input` has the structure the model was built with (a dict
            # for the seq2seq builders); `model.inputs` is its flattened order.
            return model(tf.nest.pack_sequence_as(model.input, list(args)), training=False)

    else:

        def call(*args):
            return model(*args)

    return call, specs


def convert_to_tflite(
    model,
    input_signature: Sequence[tf.TensorSpec] | None = None,
    optimize: bool = False,
) -> bytes:
    """Converts a Keras model (or any callable) to a builtin-ops-only `.tflite`.

    Args:
        model: a `keras.Model`, or a callable when `input_signature` is given.
        input_signature: `tf.TensorSpec`s of the inputs. Defaults to the model's
            inputs (in `model.inputs` order) with a dynamic batch and a dynamic
            time axis.
        optimize: apply the default TFLite size/latency optimisations.

    Returns:
        The flatbuffer bytes. Conversion fails (rather than falling back to the
        Flex delegate) if any op is not a TFLite builtin.
    """
    call, specs = _traceable(model, input_signature)
    with builtin_loop_mode():
        concrete = tf.function(call).get_concrete_function(*specs)
    # No trackable object: the converter then freezes the variables into
    # constants. Passing the model keeps them as resource variables
    # (VAR_HANDLE/READ_VARIABLE) that nothing initialises, and outputs are NaN.
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if optimize:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    return converter.convert()


def tflite_op_names(tflite_model: bytes) -> set[str]:
    """Names of every operator in every subgraph (while-loop bodies included).

    Custom (non-builtin) operators are reported as ``"CUSTOM:<name>"`` so that a
    Flex op such as ``FlexTensorListReserve`` is visible to callers.
    """
    from tensorflow.lite.python import schema_py_generated as schema

    m = schema.Model.GetRootAsModel(tflite_model, 0)
    code_names = {}
    builtin = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    for i in range(m.OperatorCodesLength()):
        oc = m.OperatorCodes(i)
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
        if code == schema.BuiltinOperator.CUSTOM:
            code_names[i] = "CUSTOM:" + oc.CustomCode().decode()
        else:
            code_names[i] = builtin.get(code, str(code))
    names = set()
    for s in range(m.SubgraphsLength()):
        sg = m.Subgraphs(s)
        for o in range(sg.OperatorsLength()):
            names.add(code_names[sg.Operators(o).OpcodeIndex()])
    return names


def run_tflite(tflite_model: bytes, *inputs: np.ndarray) -> list[np.ndarray]:
    """Runs a converted model on concrete inputs (resizing dynamic dimensions)."""
    runner = _Runner(tflite_model)
    if runner.num_inputs != len(inputs):
        raise ValueError(
            f"run_tflite: the model takes {runner.num_inputs} inputs, got {len(inputs)}."
        )
    return runner(*inputs)


# ---------------------------------------------------------------------------
# Argument checks


def _check_positive_int(where: str, **values) -> None:
    for arg, value in values.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
            raise ValueError(f"{where}: `{arg}` must be a positive int; received {arg}={value!r}.")


def _check_seq2seq(where: str, model) -> None:
    import keras

    if not isinstance(model, keras.Model):
        raise TypeError(f"{where}: `model` must be a keras.Model; received {type(model).__name__}.")
    names = {t.name for t in model.inputs} if getattr(model, "inputs", None) else set()
    if not {"encoder_inputs", "decoder_inputs"} <= names:
        raise ValueError(
            f"{where}: `model` must be a translation model built by "
            "keras_seq.models.rnn_seq2seq or transformer_seq2seq, with inputs "
            f"'encoder_inputs' and 'decoder_inputs'; received inputs {sorted(names)}."
        )


def _check_tokenizer(where: str, arg: str, tokenizer) -> None:
    from keras_seq.text import CharTokenizer, WordPieceTokenizer

    if not isinstance(tokenizer, CharTokenizer | WordPieceTokenizer):
        raise TypeError(
            f"{where}: `{arg}` must be a keras_seq.text CharTokenizer or WordPieceTokenizer; "
            f"received {type(tokenizer).__name__}."
        )


# ---------------------------------------------------------------------------
# SavedModel: strings in, strings out


class _Translator(tf.Module):
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
        super().__init__(name="translator")
        # Only the model's variables are saved, not the model: tracking it
        # would also save its optimizer state (three times the weights with Adam).
        object.__setattr__(self, "model", model)
        self.model_variables = list(model.variables)
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self._source_length = source_length
        self._target_length = target_length
        self._beam_width = beam_width
        self._length_penalty = length_penalty

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def translate(self, inputs):
        from keras_seq import decoding

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
    tensor, and returns ``outputs`` (``(B,)`` tf.string, the translations) and
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

    Example:

    >>> from keras_seq import models, text
    >>> tokenizer = text.CharTokenizer.from_corpus(["21 Nov 2026", "2026-11-21"])
    >>> model = models.rnn_seq2seq(tokenizer.vocabulary_size, tokenizer.vocabulary_size,
    ...                            units=8, embedding_dim=4)
    >>> path = export_saved_model(model, tokenizer, tokenizer, "/tmp/translator/1", 16, 12)
    >>> serve = tf.saved_model.load(path).signatures["serving_default"]
    >>> serve(inputs=tf.constant(["21 Nov 2026"]))["outputs"].shape
    TensorShape([1])
    """
    where = "export_saved_model"
    _check_seq2seq(where, model)
    _check_tokenizer(where, "source_tokenizer", source_tokenizer)
    _check_tokenizer(where, "target_tokenizer", target_tokenizer)
    _check_positive_int(
        where, source_length=source_length, target_length=target_length, beam_width=beam_width
    )
    if not float(length_penalty) >= 0.0:
        raise ValueError(f"{where}: `length_penalty` must be >= 0; received {length_penalty!r}.")
    logits_size = model.output.shape[-1]
    if target_tokenizer.vocabulary_size > logits_size:
        raise ValueError(
            f"{where}: `target_tokenizer` has {target_tokenizer.vocabulary_size} tokens but "
            f"the model predicts only {logits_size}; was the model trained with another "
            "vocabulary?"
        )
    translator = _Translator(
        model,
        source_tokenizer,
        target_tokenizer,
        int(source_length),
        int(target_length),
        int(beam_width),
        float(length_penalty),
    )
    directory = os.fspath(directory)
    signature = translator.translate.get_concrete_function()
    tf.saved_model.save(translator, directory, signatures={"serving_default": signature})
    return directory


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


# ---------------------------------------------------------------------------
# TFLite for translation models


def convert_seq2seq_to_tflite(model, optimize: bool = False) -> bytes:
    """Converts a translation model's teacher-forced forward pass to TFLite.

    Inputs, in this order: ``encoder_inputs (B, S)`` and ``decoder_inputs
    (B, T)`` int32 with dynamic ``B``, ``S`` and ``T``; output: ``logits
    (B, T, V)`` float32. Builtin ops only.

    Args:
        model: a model built by `models.rnn_seq2seq` or `models.transformer_seq2seq`.
        optimize: apply the default TFLite optimisations.

    Returns:
        The flatbuffer bytes.
    """
    _check_seq2seq("convert_seq2seq_to_tflite", model)
    return convert_to_tflite(_seq2seq_forward(model), _seq2seq_signature(), optimize=optimize)


def _seq2seq_signature():
    return [
        tf.TensorSpec([None, None], tf.int32, name="encoder_inputs"),
        tf.TensorSpec([None, None], tf.int32, name="decoder_inputs"),
    ]


def _seq2seq_forward(model):
    """The teacher-forced forward pass with positional (encoder, decoder) inputs."""

    def forward(encoder_inputs, decoder_inputs):
        return model(
            {"encoder_inputs": encoder_inputs, "decoder_inputs": decoder_inputs}, training=False
        )

    return forward


def convert_decoder_steps_to_tflite(
    model, target_length: int, optimize: bool = False
) -> tuple[bytes, bytes]:
    """Converts a translation model into an encoder and a one-step decoder.

    A device runs greedy (or any other) decoding in its own loop:

        encoder:  encoder_inputs (B, S) int32 -> constants..., state...
        step:     tokens (B,) int32, t () int32, constants..., state...
                  -> logits (B, V) float32, state...

    ``constants`` (encoder outputs, source mask, precomputed attention keys or
    cross-attention caches) are computed once; ``state`` (the recurrent state,
    or the self-attention key/value caches of length ``target_length``) is fed
    back at every step. Both have fixed counts for a given model; the encoder
    returns the constants first. `tflite_greedy_decode` is the loop.

    Args:
        model: a model built by `models.rnn_seq2seq` or `models.transformer_seq2seq`.
        target_length: the most decoding steps (sizes the Transformer's caches).
        optimize: apply the default TFLite optimisations.

    Returns:
        ``(encoder_flatbuffer, step_flatbuffer)``.
    """
    where = "convert_decoder_steps_to_tflite"
    encode, encode_signature, step, step_signature = _decoder_steps(where, model, target_length)
    return (
        convert_to_tflite(encode, encode_signature, optimize=optimize),
        convert_to_tflite(step, step_signature, optimize=optimize),
    )


def _decoder_steps(where, model, target_length):
    """The encoder and one-step decoder functions of a model, with their signatures.

    Shared by the TFLite and ONNX converters; the state and constants are
    flattened to positional tensors (see `convert_decoder_steps_to_tflite`).
    """
    from keras_seq import decoding

    _check_seq2seq(where, model)
    _check_positive_int(where, target_length=target_length)
    steps = decoding._steps_for(model)
    target_length = int(target_length)
    source_spec = tf.TensorSpec([None, None], tf.int32, name="encoder_inputs")

    def encode(encoder_inputs):
        constants, state = steps.start(encoder_inputs, target_length)
        return (*tf.nest.flatten(constants), *tf.nest.flatten(state))

    # A symbolic trace of `start` gives the structures, shapes and dtypes of
    # the constants and the state, which become the step's inputs.
    with builtin_loop_mode():
        constants_structure, state_structure = tf.function(
            lambda ids: steps.start(ids, target_length)
        ).get_concrete_function(source_spec).structured_outputs
    flat_constants = tf.nest.flatten(constants_structure)
    num_constants = len(flat_constants)
    step_signature = [
        tf.TensorSpec([None], tf.int32, name="tokens"),
        tf.TensorSpec([], tf.int32, name="t"),
        *(
            tf.TensorSpec(c.shape, c.dtype, name=f"constant_{i}")
            for i, c in enumerate(flat_constants)
        ),
        *(
            tf.TensorSpec(s.shape, s.dtype, name=f"state_{i}")
            for i, s in enumerate(tf.nest.flatten(state_structure))
        ),
    ]

    def step(tokens, t, *flat):
        constants = tf.nest.pack_sequence_as(constants_structure, list(flat[:num_constants]))
        state = tf.nest.pack_sequence_as(state_structure, list(flat[num_constants:]))
        logits, state = steps.step(tokens, t, constants, state)
        return (tf.cast(logits, tf.float32), *tf.nest.flatten(state))

    return encode, [source_spec], step, step_signature


def tflite_greedy_decode(
    encoder: bytes,
    decoder_step: bytes,
    encoder_inputs: np.ndarray,
    max_length: int,
    start_id: int | None = None,
    end_id: int | None = None,
) -> np.ndarray:
    """Greedy decoding with the two flatbuffers of `convert_decoder_steps_to_tflite`.

    The host loop a device runs: y_i = argmax logits, fed back as the next
    token, until every row has produced ``[END]`` or ``max_length`` tokens;
    finished rows emit ``[PAD]``. Same output layout as
    `keras_seq.decoding.greedy_decode`.

    Args:
        encoder: flatbuffer of the encoder.
        decoder_step: flatbuffer of the decoder step.
        encoder_inputs: ``(B, S)`` int source ids, 0-padded.
        max_length: at most the ``target_length`` the step was converted with
            (checked for Transformer caches).
        start_id: id fed as y_0. Default ``[START]``.
        end_id: id that ends a sequence. Default ``[END]``.

    Returns:
        ``(B, max_length)`` int32 ids.
    """
    from keras_seq.text import END_ID, PAD_ID, START_ID

    _check_positive_int("tflite_greedy_decode", max_length=max_length)
    start_id = START_ID if start_id is None else start_id
    end_id = END_ID if end_id is None else end_id
    encoder_inputs = np.asarray(encoder_inputs, np.int32)
    batch_size = encoder_inputs.shape[0]
    outputs = run_tflite(encoder, encoder_inputs)
    step = _Runner(decoder_step)
    # The step returns the logits and then the state.
    num_state = step.num_outputs - 1
    constants, state = outputs[: len(outputs) - num_state], outputs[len(outputs) - num_state :]
    # Self-attention caches (B, 2, T, heads, head_dim) hold T steps; writing past
    # them would be clamped by DYNAMIC_UPDATE_SLICE, silently wrong.
    cache_lengths = [s.shape[2] for s in state if s.ndim == 5]
    if cache_lengths and max_length > min(cache_lengths):
        raise ValueError(
            f"tflite_greedy_decode: `max_length` must be at most the target_length the "
            f"decoder step was converted with ({min(cache_lengths)}); received {max_length}."
        )
    ids = np.zeros((batch_size, max_length), np.int32)
    tokens = np.full((batch_size,), start_id, np.int32)
    finished = np.zeros((batch_size,), bool)
    for t in range(max_length):
        if finished.all():
            break
        logits, *state = step(tokens, np.int32(t), *constants, *state)
        tokens = np.where(finished, PAD_ID, np.argmax(logits, axis=-1)).astype(np.int32)
        ids[:, t] = tokens
        finished |= tokens == end_id
    return ids


class _Runner:
    """A TFLite interpreter kept between calls (decoding calls it once per step)."""

    def __init__(self, tflite_model: bytes):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            self.interpreter = tf.lite.Interpreter(model_content=tflite_model)
        self.inputs = self.interpreter.get_input_details()
        self.outputs = self.interpreter.get_output_details()
        self.num_inputs, self.num_outputs = len(self.inputs), len(self.outputs)
        self._shapes = None

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        shapes = [np.shape(x) for x in inputs]
        if shapes != self._shapes:
            for d, shape in zip(self.inputs, shapes):
                self.interpreter.resize_tensor_input(d["index"], shape, strict=False)
            self.interpreter.allocate_tensors()
            self._shapes = shapes
        for d, x in zip(self.inputs, inputs):
            self.interpreter.set_tensor(d["index"], np.asarray(x, dtype=d["dtype"]))
        self.interpreter.invoke()
        return [self.interpreter.get_tensor(d["index"]) for d in self.outputs]


# ---------------------------------------------------------------------------
# ONNX

_DEFAULT_OPSET = 17


def convert_to_onnx(
    model,
    path: str | os.PathLike,
    input_signature: Sequence[tf.TensorSpec] | None = None,
    opset: int = _DEFAULT_OPSET,
) -> str:
    """Converts a Keras model (or any callable) to ONNX with tf2onnx.

    The function is traced with recurrent loops in their builtin form (plain
    ``while`` loops over tensors, which become ONNX ``Loop``), weights frozen.
    ONNX input names are the `tf.TensorSpec` names.

    Args:
        model: a `keras.Model`, or a callable when `input_signature` is given.
        path: the ``.onnx`` file to write.
        input_signature: `tf.TensorSpec`s of the inputs. Defaults to the model's
            inputs (in `model.inputs` order) with dynamic batch and time axes.
        opset: ONNX opset. Default 17.

    Returns:
        ``path`` as a string.

    Example:

    >>> import keras
    >>> from keras_seq import layers
    >>> inputs = keras.Input((None, 3), name="x")
    >>> model = keras.Model(inputs, layers.GRU(4)(inputs))
    >>> convert_to_onnx(model, "/tmp/gru.onnx")
    '/tmp/gru.onnx'
    """
    import tf2onnx

    _check_positive_int("convert_to_onnx", opset=opset)
    call, specs = _traceable(model, input_signature)
    path = os.fspath(path)
    with builtin_loop_mode():
        model_proto, _ = tf2onnx.convert.from_function(
            tf.function(call), input_signature=specs, opset=int(opset)
        )
    # tf2onnx only logs TensorFlow ops it cannot map and leaves them in the
    # graph, giving a file no runtime loads: fail here instead.
    unsupported = sorted(_unknown_onnx_ops(model_proto.graph))
    if unsupported:
        raise ValueError(
            f"convert_to_onnx: tf2onnx cannot convert the TensorFlow op(s) {unsupported} "
            f"(opset {opset}); see export/ONNX.md."
        )
    with open(path, "wb") as f:
        f.write(model_proto.SerializeToString())
    return path


def _unknown_onnx_ops(graph) -> set[str]:
    """Op types of the default ONNX domain that ONNX does not define (subgraphs included)."""
    import onnx

    unknown = set()
    for node in graph.node:
        if node.domain in ("", "ai.onnx") and not onnx.defs.has(node.op_type):
            unknown.add(node.op_type)
        for attribute in node.attribute:
            for subgraph in [attribute.g, *attribute.graphs]:
                unknown |= _unknown_onnx_ops(subgraph)
    return unknown


def convert_seq2seq_to_onnx(
    model, path: str | os.PathLike, opset: int = _DEFAULT_OPSET
) -> str:
    """Converts a translation model's teacher-forced forward pass to ONNX.

    Inputs ``encoder_inputs (B, S)`` and ``decoder_inputs (B, T)`` int32 with
    dynamic axes; output ``logits (B, T, V)`` float32, as in
    `convert_seq2seq_to_tflite`.

    Args:
        model: a model built by `models.rnn_seq2seq` or `models.transformer_seq2seq`.
        path: the ``.onnx`` file to write.
        opset: ONNX opset. Default 17.

    Returns:
        ``path`` as a string.
    """
    _check_seq2seq("convert_seq2seq_to_onnx", model)
    return convert_to_onnx(_seq2seq_forward(model), path, _seq2seq_signature(), opset=opset)


def convert_decoder_steps_to_onnx(
    model,
    encoder_path: str | os.PathLike,
    decoder_step_path: str | os.PathLike,
    target_length: int,
    opset: int = _DEFAULT_OPSET,
) -> tuple[str, str]:
    """Converts a translation model into an ONNX encoder and one-step decoder.

    Same inputs and outputs as `convert_decoder_steps_to_tflite` (ONNX input
    names ``encoder_inputs``; ``tokens``, ``t``, ``constant_<i>``,
    ``state_<i>``), for a decoding loop in the host.

    Args:
        model: a model built by `models.rnn_seq2seq` or `models.transformer_seq2seq`.
        encoder_path: the encoder's ``.onnx`` file.
        decoder_step_path: the decoder step's ``.onnx`` file.
        target_length: the most decoding steps (sizes the Transformer's caches).
        opset: ONNX opset. Default 17.

    Returns:
        ``(encoder_path, decoder_step_path)`` as strings.
    """
    where = "convert_decoder_steps_to_onnx"
    encode, encode_signature, step, step_signature = _decoder_steps(where, model, target_length)
    return (
        convert_to_onnx(encode, encoder_path, encode_signature, opset=opset),
        convert_to_onnx(step, decoder_step_path, step_signature, opset=opset),
    )


# ---------------------------------------------------------------------------
# A `keras-seq train` run folder

_FORMATS = ("savedmodel", "tflite", "onnx")
_SERVING_MODEL_NAME = "translator"


def export_run(
    run_dir: str | os.PathLike,
    directory: str | os.PathLike,
    formats: Sequence[str] = ("savedmodel",),
    beam_width: int = 1,
) -> dict[str, str]:
    """Exports the model of a ``keras-seq train`` run folder.

    Reads ``model.keras`` (``safe_mode=True``), the tokenizer (``vocab.txt``,
    ``tokenizer.json``) and the lengths in ``metrics.json``'s ``config``, and
    writes under ``directory``:

    - ``"savedmodel"``: ``translator/1/``, a SavedModel from `export_saved_model`
      (strings in, strings out), in the version layout of TF Serving's model
      base path ``directory/translator``;
    - ``"tflite"``: ``tflite/seq2seq.tflite`` (`convert_seq2seq_to_tflite`),
      ``tflite/encoder.tflite`` and ``tflite/decoder_step.tflite``
      (`convert_decoder_steps_to_tflite`), with the tokenizer files and
      ``export.json`` (lengths and special ids) for the host side;
    - ``"onnx"``: ``onnx/seq2seq.onnx``, the teacher-forced forward pass.

    Args:
        run_dir: the run folder.
        directory: the output folder (created if needed).
        formats: any of ``"savedmodel"``, ``"tflite"``, ``"onnx"``.
        beam_width: decoding of the SavedModel: 1 (greedy) or a beam width.

    Returns:
        The paths written, keyed ``"savedmodel"``, ``"tflite"``,
        ``"tflite_encoder"``, ``"tflite_decoder_step"``, ``"onnx"``.
    """
    import keras

    import keras_seq.layers  # noqa: F401  (registers the layers for loading)
    import keras_seq.models  # noqa: F401
    from keras_seq import text

    where = "export_run"
    if isinstance(formats, str):
        formats = (formats,)
    unknown = [f for f in formats if f not in _FORMATS]
    if unknown or not formats:
        raise ValueError(
            f"{where}: `formats` must be a non-empty selection of {list(_FORMATS)}; "
            f"received {list(formats)}."
        )
    _check_positive_int(where, beam_width=beam_width)
    run_dir, directory = os.fspath(run_dir), os.fspath(directory)
    metrics_path = os.path.join(run_dir, "metrics.json")
    if not os.path.isfile(metrics_path):
        raise FileNotFoundError(
            f"{where}: {metrics_path} does not exist; `run_dir` must be a folder written "
            "by `keras-seq train`."
        )
    with open(metrics_path, encoding="utf-8") as f:
        config = json.load(f).get("config", {})
    for key in ("source_length", "target_length"):
        if key not in config:
            raise ValueError(f"{where}: {metrics_path} has no config.{key}.")
    source_length, target_length = int(config["source_length"]), int(config["target_length"])
    model = keras.saving.load_model(os.path.join(run_dir, "model.keras"), safe_mode=True)
    tokenizer = text.load_tokenizer(run_dir)

    written = {}
    if "savedmodel" in formats:
        written["savedmodel"] = export_saved_model(
            model,
            tokenizer,
            tokenizer,
            os.path.join(directory, _SERVING_MODEL_NAME, "1"),
            source_length,
            target_length,
            beam_width=beam_width,
        )
    if "tflite" in formats:
        folder = os.path.join(directory, "tflite")
        os.makedirs(folder, exist_ok=True)
        encoder, decoder_step = convert_decoder_steps_to_tflite(model, target_length)
        for key, name, flatbuffer in (
            ("tflite", "seq2seq.tflite", convert_seq2seq_to_tflite(model)),
            ("tflite_encoder", "encoder.tflite", encoder),
            ("tflite_decoder_step", "decoder_step.tflite", decoder_step),
        ):
            written[key] = os.path.join(folder, name)
            with open(written[key], "wb") as f:
                f.write(flatbuffer)
        # The device tokenizes on the host: it needs the vocabulary and lengths.
        tokenizer.save(folder)
        with open(os.path.join(folder, "export.json"), "w", encoding="utf-8") as f:
            json.dump(
                {
                    "source_length": source_length,
                    "target_length": target_length,
                    "pad_id": text.PAD_ID,
                    "start_id": text.START_ID,
                    "end_id": text.END_ID,
                },
                f,
                indent=2,
            )
            f.write("\n")
    if "onnx" in formats:
        os.makedirs(os.path.join(directory, "onnx"), exist_ok=True)
        written["onnx"] = convert_seq2seq_to_onnx(
            model, os.path.join(directory, "onnx", "seq2seq.onnx")
        )
    return written
