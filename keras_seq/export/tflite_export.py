"""TFLite: builtin ops only, optional quantization, and a host greedy loop.

Files are run with the maintained TFLite runtime, `ai_edge_litert`
(``tf.lite.Interpreter`` is deprecated).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from keras_seq._backend import EXPORT_THERE, require_tensorflow
from keras_seq._validation import (
    ArgumentValueError,
    check_bool,
    check_positive_int,
)
from keras_seq.export._checks import check_quantize, check_seq2seq
from keras_seq.export._lowering import BuiltinLoops
from keras_seq.export._tflite_converter import convert_with_signature
from keras_seq.export._tracing import (
    decoder_step_functions,
    flat_outputs,
    language_model_step_function,
    models_of,
    seq2seq_forward,
    seq2seq_signature,
    signature_specs,
    traceable,
)
from keras_seq.export.calibration import as_traced, rows, step_examples
from keras_seq.export.integer_tflite import (
    calibration_examples,
    check_integer_arguments,
    convert_integer,
    has_loops,
    is_integer,
    quantize_flatbuffer,
    static_specs,
)
from keras_seq.export.lstm_fusion import convert_fused_lstm


def convert_to_tflite(
    model,
    input_signature: Sequence[tf.TensorSpec] | None = None,
    quantize: str | None = None,
    fuse_lstm: bool = False,
    batch_size: int | None = None,
    representative_data=None,
    integer_io: bool = False,
) -> bytes:
    """Converts a Keras model (or any callable) to a builtin-ops-only `.tflite`.

    Weights are frozen into constants; conversion fails (rather than falling
    back to the Flex delegate) if any op is not a TFLite builtin, with one
    `ValueError` line naming those ops. Keras' own ``LSTM``, ``GRU``,
    ``SimpleRNN`` and ``RNN`` layers in the model (masked, ``go_backwards``,
    stacked, in a ``Bidirectional``) run this package's loop over their own
    cell for the conversion, whose ops are builtins (Keras' loop of
    TensorArrays is not, with a dynamic batch or length); the model is left
    as it was. In a callable that is not a `keras.Model`, they do so only
    where the callable names its models (this package's exporters do).

    Args:
        model: a `keras.Model`, or a callable when `input_signature` is given.
        input_signature: `tf.TensorSpec`s of the inputs. Defaults to the model's
            inputs (in `model.inputs` order) with a dynamic batch and a dynamic
            time axis.
        quantize: `None` (float32), ``"dynamic"`` (weights stored as int8,
            dynamic-range quantization: no representative dataset) or
            ``"float16"`` (weights stored as float16, computed in float32);
            integer-only: ``"int8"`` (int8 weights and activations) or
            ``"int16x8"`` (int8 weights, int16 activations), each op an
            integer kernel with float inputs and outputs, calibrated on
            `representative_data`. Every length is static (of the
            `input_signature`, else of the examples): ``"int8"`` keeps each
            recurrent loop as a ``WHILE``, ``"int16x8"`` runs it unrolled;
            for a stream, convert `streaming_model(model)` fed one step at
            a time. The files run in LiteRT and in TensorFlow Lite for
            Microcontrollers (but for a 16x8 model's int16 ``EXP``, ``LOG``,
            ``DIV``, ``SQRT`` or ``GELU``: the NTM, MinLSTM, RG-LRU, sLSTM,
            a block's feed-forward). The quantizer runs in a child process,
            so a crash of TensorFlow's quantizer or LiteRT is one
            `ValueError` line (see `keras_seq.export.integer_tflite`).
        fuse_lstm: turn every `PeepholeLSTM`, `CoupledGateLSTM` and
            `keras.layers.LSTM` (every layer whose cell declares an
            `LSTMForm`: their subclasses that keep the step, a user's cell)
            into TFLite's fused ``UNIDIRECTIONAL_SEQUENCE_LSTM``
            with its peephole and coupled-input-gate inputs set (needs a static
            batch: `batch_size`, default 1); each ``invoke()`` starts from a
            zero state. A layer the kernel cannot express (one that receives a
            mask or an ``initial_state``, ``return_state=True``, ``stateful``,
            zoneout, other activations than tanh/sigmoid, a compute dtype other
            than float32) keeps its builtin loop, with a `UserWarning` naming the
            layer and the reason. See `keras_seq.export.lstm_fusion`. Faster
            is not guaranteed: LiteRT's default XNNPACK delegate speeds up
            the loop form but not the fused op, so on a CPU the loop can be
            the faster one; the fused op is for runtimes and delegates with
            an LSTM kernel (measurements in benchmarks/RESULTS.md). With
            ``quantize="int8"``, each fused op is TFLite's integer LSTM
            kernel (int16 cell state and peepholes), still over any length;
            another loop left beside it is a `ValueError` (convert unfused);
            with ``"int16x8"``, TensorFlow Lite for Microcontrollers' 16x8
            LSTM kernel (LiteRT has none) over a static length, for a plain
            LSTM (peepholes and CIFG are a `ValueError`).
        batch_size: a fixed batch size for the default signature (`None`:
            dynamic).
        representative_data: for ``"int8"`` and ``"int16x8"`` only, the
            calibration examples: an iterable (or a callable returning one) of
            examples, each one array (a model of one input), a list in input
            order or a dict keyed by input name; TensorFlow's guide suggests
            a few hundred.
        integer_io: with ``"int8"`` (``"int16x8"``), the float inputs and
            outputs are int8 (int16) too, with no QUANTIZE or DEQUANTIZE:
            the caller quantizes with each tensor's scale and zero point.

    Returns:
        The flatbuffer bytes.

    Examples:
        >>> import keras
        >>> from keras_seq import layers
        >>> inputs = keras.Input((None, 3))
        >>> model = keras.Model(inputs, layers.GRU(4)(inputs))
        >>> flatbuffer = convert_to_tflite(model, quantize="float16")
        >>> sorted(op for op in tflite_op_names(flatbuffer) if op.startswith("CUSTOM"))
        []
    """
    require_tensorflow("keras_seq.export.convert_to_tflite", EXPORT_THERE)
    where = "convert_to_tflite"
    check_quantize(where, quantize)
    fuse_lstm = check_bool(where, "fuse_lstm", fuse_lstm)
    batch_size = check_positive_int(where, "batch_size", batch_size, allow_none=True)
    integer, integer_io = check_integer_arguments(where, quantize, representative_data,
                                                  integer_io)
    if fuse_lstm:
        return convert_fused_lstm(
            model, input_signature=input_signature, quantize=quantize, batch_size=batch_size,
            representative_data=representative_data, integer_io=integer_io,
        )
    if batch_size is not None and input_signature is not None:
        raise ArgumentValueError(where, f'`batch_size` sets the batch of the default signature; with an `input_signature`, put the batch size in its specs. Received batch_size={batch_size}.')
    call, specs = traceable(model, input_signature, batch_size)
    specs, names = signature_specs(specs)
    examples = None
    if integer:
        examples = calibration_examples(where, representative_data, specs)
        specs = static_specs(where, specs, examples)
    # Keras' own recurrent layers run the package's loop in this trace
    # (`BuiltinLoops`); an int8 model's loops stay loops, quantized from the
    # float file; a 16x8 model's run unrolled.
    lowering = BuiltinLoops(where, integer=integer, integer_loops=quantize == "int8")
    with lowering.keras_layers(models_of(model)):
        concrete = tf.function(flat_outputs(lowering.traced(call)), autograph=False)
        concrete = concrete.get_concrete_function(*specs)
    if quantize == "int8" and has_loops(concrete):
        return quantize_flatbuffer(where, convert_with_signature(concrete, names, None), names,
                                   quantize, examples, integer_io=integer_io)
    if integer:
        return convert_integer(where, concrete, names, quantize, examples,
                               integer_io=integer_io)
    return convert_with_signature(concrete, names, quantize)


def tflite_op_names(tflite_model: bytes) -> set[str]:
    """Names of every operator in every subgraph (while-loop bodies included).

    Custom (non-builtin) operators are reported as ``"CUSTOM:<name>"`` so that a
    Flex op such as ``FlexTensorListReserve`` is visible to callers.
    """
    from ai_edge_litert import schema_py_generated as schema

    m = schema.Model.GetRootAsModel(tflite_model, 0)
    builtin = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    code_names = {}
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


class _Runner:
    """An interpreter kept between calls (decoding calls it once per step)."""

    def __init__(self, tflite_model: bytes):
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_content=tflite_model)
        self.inputs = self.interpreter.get_input_details()
        self.outputs = self.interpreter.get_output_details()
        self.num_inputs, self.num_outputs = len(self.inputs), len(self.outputs)
        self._shapes = None

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        shapes = [np.shape(x) for x in inputs]
        if shapes != self._shapes:
            self._check_shapes(shapes)
            for d, shape in zip(self.inputs, shapes):
                self.interpreter.resize_tensor_input(d["index"], shape, strict=False)
            self.interpreter.allocate_tensors()
            self._shapes = shapes
        for d, x in zip(self.inputs, inputs):
            self.interpreter.set_tensor(d["index"], np.asarray(x, dtype=d["dtype"]))
        self.interpreter.invoke()
        return [self.interpreter.get_tensor(d["index"]) for d in self.outputs]

    def _check_shapes(self, shapes):
        """Fixed dimensions (a state's width) must match: LiteRT itself only
        fails later, in a delegate's "failed to prepare"."""
        for i, (d, shape) in enumerate(zip(self.inputs, shapes)):
            expected = tuple(int(n) for n in d["shape_signature"])
            if len(shape) != len(expected) or any(
                e != -1 and n != e for n, e in zip(shape, expected)
            ):
                shown = tuple(None if e == -1 else e for e in expected)
                raise ArgumentValueError('run_tflite', f"input {i} ({d['name']!r}) must have shape {shown} (None: any size); received shape {tuple(shape)}.")


def run_tflite(tflite_model: bytes, *inputs: np.ndarray) -> list[np.ndarray]:
    """Runs a converted model on concrete inputs (resizing dynamic dimensions)."""
    runner = _Runner(tflite_model)
    if runner.num_inputs != len(inputs):
        raise ArgumentValueError('run_tflite', f'the model takes {runner.num_inputs} inputs, received {len(inputs)}.')
    return runner(*inputs)


# ---------------------------------------------------------------------------
# Translation models


def convert_seq2seq_to_tflite(model, quantize: str | None = None) -> bytes:
    """Converts a translation model's teacher-forced forward pass to TFLite.

    Inputs, in this order: ``encoder_inputs (B, S)`` and ``decoder_inputs
    (B, T)`` int32 with dynamic ``B``, ``S`` and ``T``; output: ``logits
    (B, T, V)`` float32. Builtin ops only.

    Args:
        model: a model built by `models.rnn_seq2seq` or `models.transformer_seq2seq`.
        quantize: `None`, ``"dynamic"`` or ``"float16"`` (see `convert_to_tflite`).

    Returns:
        The flatbuffer bytes.
    """
    require_tensorflow("keras_seq.export.convert_seq2seq_to_tflite", EXPORT_THERE)
    where = "convert_seq2seq_to_tflite"
    check_seq2seq(where, model)
    check_quantize(where, quantize, integer=False)
    return convert_to_tflite(seq2seq_forward(model), seq2seq_signature(), quantize=quantize)


def convert_decoder_steps_to_tflite(
    model, target_length: int, quantize: str | None = None, fuse_lstm: bool = False,
    representative_data=None,
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
    returns the constants first. They are the flattened nests of
    `keras_seq.decoding.decoder_steps`. `tflite_greedy_decode` is the loop.

    Args:
        model: a model built by `models.rnn_seq2seq` or `models.transformer_seq2seq`.
        target_length: the most decoding steps (sizes the Transformer's caches).
        quantize: `None`, ``"dynamic"``, ``"float16"``, ``"int8"`` or
            ``"int16x8"`` (see `convert_to_tflite`). An integer encoder takes a
            batch of 1 and sources padded to the calibration sources' length;
            an integer step, a batch of 1.
        fuse_lstm: convert the encoder's LSTM layers to TFLite's fused kernel
            (see `convert_to_tflite`); the encoder then takes a batch of 1.
        representative_data: for an integer ``quantize``, source ids
            ``(N, S)`` int (0-padded to one length ``S``): the encoder is
            calibrated on them, and the step on the inputs it is fed while the
            float model decodes them greedily.

    Returns:
        ``(encoder_flatbuffer, step_flatbuffer)``.
    """
    require_tensorflow("keras_seq.export.convert_decoder_steps_to_tflite", EXPORT_THERE)
    where = "convert_decoder_steps_to_tflite"
    check_quantize(where, quantize)
    encode, encode_signature, step, step_signature = decoder_step_functions(
        where, model, target_length
    )
    if is_integer(quantize):
        sources, step_data = _decoder_calibration(where, model, encode, encode_signature, step,
                                                  step_signature, representative_data,
                                                  target_length)
        return (
            convert_to_tflite(encode, encode_signature, quantize=quantize, fuse_lstm=fuse_lstm,
                              representative_data=sources),
            convert_to_tflite(step, step_signature, quantize=quantize,
                              representative_data=step_data),
        )
    fused = {"fuse_lstm": True, "batch_size": 1} if fuse_lstm else {}
    return (
        convert_to_tflite(encode, encode_signature, quantize=quantize, **fused,
                          representative_data=representative_data),
        convert_to_tflite(step, step_signature, quantize=quantize),
    )


def _decoder_calibration(where, model, encode, encode_signature, step, step_signature,
                         representative_data, target_length):
    """The encoder's examples (each source) and the step's (its inputs while
    the float model decodes each source greedily)."""
    from keras_seq.reserved_tokens import END_ID, PAD_ID, START_ID

    sources = _token_id_rows(where, representative_data)
    traced_encode = as_traced(encode, encode_signature)
    traced_step = as_traced(step, step_signature)

    def first(source):
        return [np.array([START_ID], np.int32), np.int32(0),
                *(o.numpy() for o in traced_encode(source))]

    def advance(inputs, outputs, source, t):
        token = int(np.argmax(outputs[0], -1)[0])
        if token in (END_ID, PAD_ID) or t + 1 >= target_length:
            return None
        num_state = len(outputs) - 1
        constants = inputs[2:len(inputs) - num_state]
        return [np.array([token], np.int32), np.int32(t + 1), *constants, *outputs[1:]]

    steps = step_examples(traced_step, first, advance, sources, count=_STEP_EXAMPLES_PER_SOURCE
                          * len(sources))
    return sources, steps


def _token_id_rows(where, representative_data) -> list[np.ndarray]:
    """``representative_data`` of token ids ``(N, T)`` as rows of one."""
    if representative_data is None:
        raise ArgumentValueError(where, "integer quantization calibrates on real inputs: give "
                                 "`representative_data`, token ids (N, T) of training "
                                 "examples (0-padded to one length).")
    ids = np.asarray(representative_data)
    if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer) or ids.shape[0] == 0:
        raise ArgumentValueError(where, "`representative_data` must be token ids (N, T) "
                                 f"int, N >= 1; received shape {ids.shape}, dtype {ids.dtype}.")
    return rows(ids.astype(np.int32))


# Steps recorded per calibration source or text, at most.
_STEP_EXAMPLES_PER_SOURCE = 8


def convert_classifier_to_tflite(model, quantize: str | None = None,
                                 representative_data=None) -> bytes:
    """Converts a text classifier to TFLite, with the softmax inside.

    Input ``token_ids (B, T)`` int32 (dynamic ``B`` and ``T``; 0 = padding at
    the end, the text's first tokens as `keras_seq.data.classification_ids`
    gives them); output the class probabilities ``(B, classes)`` float32.
    Builtin ops only.

    Args:
        model: a classifier ``token_ids (B, T) -> logits (B, classes)``.
        quantize: `None`, ``"dynamic"``, ``"float16"``, ``"int8"`` or
            ``"int16x8"`` (see `convert_to_tflite`); an integer file takes a
            batch of 1 and ids padded to the calibration ids' length.
        representative_data: for an integer ``quantize``, token ids ``(N, T)``
            of training texts, 0-padded to one length ``T``.

    Returns:
        The flatbuffer bytes.
    """
    require_tensorflow("keras_seq.export.convert_classifier_to_tflite", EXPORT_THERE)
    where = "convert_classifier_to_tflite"
    check_quantize(where, quantize)
    if is_integer(quantize):
        representative_data = _token_id_rows(where, representative_data)
    return convert_to_tflite(classifier_probabilities(model), quantize=quantize,
                             representative_data=representative_data)


def classifier_probabilities(model):
    """The Keras model ``token_ids -> softmax(model(token_ids))`` (float32), sharing
    ``model``'s layers: what a device runs."""
    import keras

    probabilities = keras.layers.Activation("softmax", dtype="float32", name="probabilities")
    return keras.Model(model.inputs[0], probabilities(model.outputs[0]), name=model.name)


def convert_language_model_step_to_tflite(
    model, context: int, quantize: str | None = None, representative_data=None
) -> bytes:
    """Converts a language model into one generation step, for a device's own loop.

        step:  token (B,) int32, [t () int32,] state_0, state_1, ...
               -> output_0: logits (B, V) float32, output_1 ...: the new state

    ``state`` is each recurrent layer's states in layer and cell order (zeros
    to start), or one key/value cache ``(B, 2, context, heads, head_dim)``
    per Transformer block (zeros to start) with ``t`` its write position:
    the step attends to positions 0 … t of the cache. A device feeds the
    prompt token by token, then its own choice of each next token; a
    Transformer whose cache is full restarts it at t = 0 with the last
    ``context // 2`` tokens fed again (what `keras_seq.decoding.sample`
    does with ``context``). The names are the signature's: inputs
    ``token``, ``t``, ``state_i``; outputs ``output_0`` … ``output_n``.

    Args:
        model: a model built by `models.language_model` (``"rnn"`` or
            ``"transformer"``).
        context: positions of the Transformer's caches (the run's training
            ``context``); not used by a recurrent model.
        quantize: `None`, ``"dynamic"``, ``"float16"``, ``"int8"`` or
            ``"int16x8"`` (see `convert_to_tflite`); an integer step takes a
            batch of 1.
        representative_data: for an integer ``quantize``, token ids ``(N, T)``
            of training text: the step is calibrated on what it is fed while
            the float step reads each row from a zero state (at most
            ``context`` tokens of a row for a Transformer).

    Returns:
        The flatbuffer bytes.
    """
    require_tensorflow("keras_seq.export.convert_language_model_step_to_tflite", EXPORT_THERE)
    where = "convert_language_model_step_to_tflite"
    check_quantize(where, quantize)
    step, signature, initial_state = language_model_step_function(where, model, context)
    if is_integer(quantize):
        representative_data = _language_model_calibration(
            where, step, signature, initial_state, representative_data, context)
    return convert_to_tflite(step, signature, quantize=quantize,
                             representative_data=representative_data)


def _language_model_calibration(where, step, signature, initial_state, representative_data,
                                context):
    texts = _token_id_rows(where, representative_data)
    positional = any(spec.name == "t" for spec in signature)
    traced = as_traced(step, signature)

    def first(ids):
        return [ids[:, 0], *([np.int32(0)] if positional else []), *initial_state(1)]

    def advance(inputs, outputs, ids, t):
        if t + 1 >= ids.shape[1] or (positional and t + 1 >= context):
            return None
        return [ids[:, t + 1], *([np.int32(t + 1)] if positional else []), *outputs[1:]]

    return step_examples(traced, first, advance, texts, count=sum(
        min(ids.shape[1], context if positional else ids.shape[1]) for ids in texts))


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
    from keras_seq.reserved_tokens import END_ID, PAD_ID, START_ID

    max_length = check_positive_int("tflite_greedy_decode", "max_length", max_length)
    start_id = START_ID if start_id is None else start_id
    end_id = END_ID if end_id is None else end_id
    encoder_inputs = np.asarray(encoder_inputs, np.int32)
    batch_size = encoder_inputs.shape[0]
    outputs = run_tflite(encoder, encoder_inputs)
    step = _Runner(decoder_step)
    # The step returns the logits and then the state.
    num_state = step.num_outputs - 1
    constants, state = outputs[: len(outputs) - num_state], outputs[len(outputs) - num_state :]
    # Self-attention caches (B, 2, T, heads, head_dim) hold T steps; a step
    # past them would attend to a cache without its own keys: wrong, silently.
    cache_lengths = [s.shape[2] for s in state if s.ndim == 5]
    if cache_lengths and max_length > min(cache_lengths):
        raise ArgumentValueError('tflite_greedy_decode', f'`max_length` must be at most the target_length the decoder step was converted with ({min(cache_lengths)}); received {max_length}.')
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
