"""Edits of the TFLite flatbuffer that `keras_seq.export.lstm_fusion` converts.

The converter's ``UNIDIRECTIONAL_SEQUENCE_LSTM`` ops are plain LSTMs with a
cell clip and a state kept between invokes; `edit_fused_ops` makes each one
compute its Keras layer (matched by its weights): peephole inputs, CIFG, no
cell clip, a zero state at the start of every ``invoke()``.
`inputs_outputs_in_call_order` undoes the SavedModel route's ordering of
inputs and outputs by signature key. `integer_lstm_states_agree` mends the
scales of an integer fused op's hidden state; `integer_only` makes integer
what the quantizer leaves in float and need not be. `compacted` gives an unrolled model's
repeated constants one tensor. All work on the object API of
``ai_edge_litert.schema_py_generated`` and write a new flatbuffer.

References:
    Inputs of the op: ``tensorflow/lite/kernels/lstm_shared.h``; kernel:
    ``tensorflow/lite/kernels/unidirectional_sequence_lstm.cc``.
"""

from __future__ import annotations

import copy
import dataclasses

import flatbuffers
import numpy as np

# Inputs of UNIDIRECTIONAL_SEQUENCE_LSTM (tensorflow/lite/kernels/lstm_shared.h);
# -1 marks an absent optional input.
INPUT_TO_GATE = {"i": 1, "f": 2, "c": 3, "o": 4}
RECURRENT_TO_GATE = {"i": 5, "f": 6, "c": 7, "o": 8}
CELL_TO_GATE = {"i": 9, "f": 10, "o": 11}  # peepholes
GATE_BIAS = {"i": 12, "f": 13, "c": 14, "o": 15}
_OUTPUT_STATE, _CELL_STATE = 18, 19


@dataclasses.dataclass
class FusedLayer:
    """What the flatbuffer edit needs to know about one routed layer call."""

    name: str  # for messages: "PeepholeLSTM 'peephole_lstm'"
    cifg: bool
    weights: dict[int, np.ndarray]  # expected op input -> value, to recognise the op
    peepholes: dict[int, np.ndarray]  # op input -> peephole vector

    def same_edit(self, other: FusedLayer) -> bool:
        return (
            self.cifg == other.cifg
            and self.peepholes.keys() == other.peepholes.keys()
            and all(np.array_equal(v, other.peepholes[k]) for k, v in self.peepholes.items())
        )


def _schema():
    from ai_edge_litert import schema_py_generated

    return schema_py_generated


def _load(flatbuffer: bytes):
    schema = _schema()
    return schema.ModelT.InitFromObj(schema.Model.GetRootAs(flatbuffer, 0))


def _pack(model_t) -> bytes:
    builder = flatbuffers.Builder(0)
    builder.Finish(model_t.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def inputs_outputs_in_call_order(flatbuffer: bytes, input_names: list[str]) -> bytes:
    """Puts the main subgraph's inputs in signature order and outputs in call order.

    The SavedModel route orders them by signature key ("output_10" before
    "output_2"); the signature def maps keys to tensors.
    """
    model_t = _load(flatbuffer)
    if not model_t.signatureDefs:
        return flatbuffer
    signature = model_t.signatureDefs[0]
    subgraph = model_t.subgraphs[signature.subgraphIndex]
    inputs = {_text(t.name): t.tensorIndex for t in signature.inputs}
    outputs = {_text(t.name): t.tensorIndex for t in signature.outputs}
    if sorted(inputs) == sorted(input_names):
        subgraph.inputs = np.array([inputs[name] for name in input_names], np.int32)
    keys = [f"output_{i}" for i in range(len(outputs))]
    if sorted(outputs) == sorted(keys):
        subgraph.outputs = np.array([outputs[key] for key in keys], np.int32)
    return _pack(model_t)


def compacted(flatbuffer: bytes) -> bytes:
    """The same model in fewer bytes: one tensor per distinct constant, no
    names on the tensors between ops, every tensor without data on the
    empty buffer 0.

    An unrolled loop reads its weights at every step, and the converter
    gives each read a tensor of its own with its own copy of the
    per-channel scales (int8): for a 64-unit encoder over 31 positions,
    more bytes than the weights.
    """
    model_t = _load(flatbuffer)
    for subgraph in model_t.subgraphs:
        first = {}  # constant's key -> its first tensor
        same = {}  # tensor -> the tensor that replaces it
        for index, tensor in enumerate(subgraph.tensors):
            data = model_t.buffers[tensor.buffer].data
            if tensor.isVariable or data is None or len(data) == 0:
                if not tensor.isVariable:
                    tensor.buffer = 0
                continue
            same[index] = first.setdefault(_constant_key(tensor, data), index)
        for op in subgraph.operators:
            op.inputs = np.array([same.get(int(i), int(i)) for i in op.inputs], np.int32)
        edges = {int(i) for i in subgraph.inputs} | {int(i) for i in subgraph.outputs}
        for index, tensor in enumerate(subgraph.tensors):
            if index not in edges:
                tensor.name = None  # no name at all: an empty one still takes 8+ bytes
    _drop_unused_tensors_and_buffers(model_t)
    return _pack(model_t)


def _constant_key(tensor, data) -> tuple:
    quantization = tensor.quantization
    scales = None
    if quantization is not None:
        scales = tuple(
            None if values is None else tuple(np.asarray(values).tolist())
            for values in (quantization.scale, quantization.zeroPoint,
                           quantization.min, quantization.max)
        ) + (quantization.quantizedDimension,)
    shape = None if tensor.shape is None else tuple(np.asarray(tensor.shape).tolist())
    return tensor.type, shape, scales, np.asarray(data, np.uint8).tobytes()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def edit_fused_ops(flatbuffer: bytes, layers: dict[str, FusedLayer]) -> bytes:
    """Sets peepholes, CIFG, cell clip 0 and a zero state on every fused op."""
    schema = _schema()
    model_t = _load(flatbuffer)
    fused = set()
    for subgraph in model_t.subgraphs:
        operators = []
        for op in subgraph.operators:
            if _builtin_code(model_t, op) == schema.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM:
                matches = _matching_layers(model_t, subgraph, op, layers)
                layer = layers[matches[0]]
                fused.update(matches)
                op.inputs = np.array(op.inputs, np.int32)  # the loaded one is read-only
                op.builtinOptions.cellClip = 0.0
                if layer.cifg:
                    for gate_input in (INPUT_TO_GATE, RECURRENT_TO_GATE, CELL_TO_GATE, GATE_BIAS):
                        op.inputs[gate_input["i"]] = -1
                weights_type = subgraph.tensors[op.inputs[INPUT_TO_GATE["f"]]].type
                for index, vector in layer.peepholes.items():
                    op.inputs[index] = _add_constant(model_t, subgraph, vector, weights_type)
                for i in (_OUTPUT_STATE, _CELL_STATE):
                    op.inputs[i] = _own_state(model_t, subgraph, op.inputs[i])
                    operators.append(_fill_zeros(model_t, subgraph, op.inputs[i]))
            operators.append(op)
        subgraph.operators = operators
        subgraph.operators = _without_unread_dequantizes(model_t, subgraph)
    missing = [layer.name for key, layer in layers.items() if key not in fused]
    if missing:
        raise RuntimeError(
            f"convert_fused_lstm: the converter did not fuse {', '.join(missing)}; "
            "without the fused op the peephole and CIFG edits cannot be applied."
        )
    _drop_unused_tensors_and_buffers(model_t)
    return _pack(model_t)


def builtin_op_count(flatbuffer: bytes, name: str) -> int:
    """How many ops of builtin ``name`` (e.g. ``"WHILE"``) the model has."""
    code = getattr(_schema().BuiltinOperator, name)
    model_t = _load(flatbuffer)
    return sum(_builtin_code(model_t, op) == code
               for subgraph in model_t.subgraphs for op in subgraph.operators)


def integer_lstm_states_agree(flatbuffer: bytes) -> bytes:
    """Each integer fused LSTM op's hidden state in the scale of its output.

    Without a projection, TFLite's integer LSTM kernel writes h in the scale
    of its intermediate tensor 4 into its output-state tensor, reads that
    back as h(t-1) in the state tensor's scale, and copies the raw int8
    values out as its output. TensorFlow's quantizer can give the three
    different scales (the output's is shared with a CONCATENATION after it,
    a Bidirectional's): here they take the output's, and the ``FILL`` that
    zeroes the state writes that zero point.
    """
    schema = _schema()
    model_t = _load(flatbuffer)
    lstm = schema.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM
    fill = schema.BuiltinOperator.FILL
    for subgraph in model_t.subgraphs:
        fills = {int(op.outputs[0]): op for op in subgraph.operators
                 if _builtin_code(model_t, op) == fill}
        for op in subgraph.operators:
            if (_builtin_code(model_t, op) != lstm or op.intermediates is None
                    or len(op.intermediates) != 5
                    or subgraph.tensors[op.inputs[0]].type != schema.TensorType.INT8):
                continue
            output = subgraph.tensors[op.outputs[0]].quantization
            state_index = int(op.inputs[_OUTPUT_STATE])
            for index in (state_index, int(op.intermediates[4])):
                subgraph.tensors[index].quantization = copy.deepcopy(output)
            if state_index in fills:  # a new zero: the old one may be shared
                zero = np.array(int(output.zeroPoint[0]), np.int8)
                fills[state_index].inputs = np.array(
                    [fills[state_index].inputs[0],
                     _add_tensor(model_t, subgraph, zero, schema.TensorType.INT8, "zero",
                                 copy.deepcopy(output))], np.int32)
    _drop_unused_tensors_and_buffers(model_t)
    return _pack(model_t)


# Ops that move values without computing: the input of their values, by op.
_MOVES = {"SPLIT": 1, "SPLIT_V": 0, "STRIDED_SLICE": 0, "SLICE": 0, "RESHAPE": 0}
# Arithmetic that TFLite computes on int8 and int16 with any input scales.
_ARITHMETIC = ("ADD", "SUB", "MUL", "NEG", "SQUARE")


def integer_only(flatbuffer: bytes) -> bytes:
    """What TensorFlow's quantizer leaves in float and can be integer, made
    integer.

    - An op that only moves values (a gate block's ``SPLIT``, at times) and
      reads a ``DEQUANTIZE``: it reads the integer tensor itself, its
      outputs in that tensor's type and scale; a ``QUANTIZE`` after it
      requantizes (integer to integer), a float op after it reads a new
      ``DEQUANTIZE``.
    - ``ADD``, ``SUB``, ``MUL``, ``NEG`` (Keras' ``LayerNormalization``
      negates) or ``SQUARE`` of dequantized tensors, read by one
      ``QUANTIZE``: the integer kernel, from the integer tensors to that
      ``QUANTIZE``'s output (``NEG`` as a ``MUL`` by an integer -1,
      ``SQUARE`` as ``x * x``).
    - A mask's ``CAST`` from bool to float before ``QUANTIZE`` ops: a
      ``SELECT_V2`` of the quantized 1 and 0 in each ``QUANTIZE``'s scale.
    - A ``SELECT_V2`` (a padding mask's: keep the state, or take the
      new one) of dequantized tensors or float constants, read by one
      ``QUANTIZE`` (TensorFlow's 16x8 quantizer has no int16 kernel for it
      and leaves it in float): selects in the ``QUANTIZE``'s scale, each
      input requantized to it (a constant: quantized).
    - A comparison of a dequantized tensor with a float constant (MinGRU's
      ``x >= 0``, left in float by the 16x8 quantizer): compares the
      integer tensor with the constant quantized in its scale.
    - An integer ``SELECT`` or ``SELECT_V2`` whose data inputs' scales
      differ from its output's (the 16x8 quantizer's, in MinGRU's
      activation): each such input requantized to the output's scale (the
      kernel copies raw values).
    - An int16 ``SQUARED_DIFFERENCE`` (a norm's variance), which LiteRT
      has no int16 kernel for: a ``SUB`` into the square root of the
      output's range, then a ``MUL`` of that by itself.
    - A constant of zeros (an unrolled loop's first state) that the 16x8
      quantizer gave the scale 0, on which LiteRT aborts: its op's output
      scale (any scale represents zeros exactly).
    """
    model_t = _load(flatbuffer)
    for subgraph in model_t.subgraphs:
        _zeros_scaled(model_t, subgraph)
        _int16_squared_differences(model_t, subgraph)
        _selects_in_one_scale(model_t, subgraph)
        while (_integer_moves(model_t, subgraph) | _integer_arithmetic(model_t, subgraph)
               | _integer_selects(model_t, subgraph)
               | _integer_comparisons(model_t, subgraph)):
            subgraph.operators = _without_unread_dequantizes(model_t, subgraph)
        _integer_bool_casts(model_t, subgraph)
        subgraph.operators = _without_unread_dequantizes(model_t, subgraph)
    _drop_unused_tensors_and_buffers(model_t)
    return _pack(model_t)


def prepared_for_16x8(flatbuffer: bytes, ranges: dict[str, tuple[float, float]]) -> bytes:
    """A float flatbuffer as TensorFlow's 16x8 quantizer needs it.

    - Each op's constants its own, each on a buffer of its own: the
      converter shares one tensor (or buffer) between equal constants, such
      as an unrolled loop's bias, read by every step's matmul; the
      quantizer then quantizes it for one reader (an int64 bias in that
      step's input scale) and the others compute with wrong values.
      (`compacted` shares what stays equal afterwards.)
    - Each integer input named in ``ranges`` (by its signature name) given
      that range: the quantizer wants one on every input, token ids too.
    """
    schema = _schema()
    model_t = _load(flatbuffer)
    for subgraph in model_t.subgraphs:
        taken = set()  # constant tensors an op reads already
        for op in subgraph.operators:
            inputs = [int(i) for i in op.inputs]
            for position, index in enumerate(inputs):
                if index < 0:
                    continue
                tensor = subgraph.tensors[index]
                data = model_t.buffers[tensor.buffer].data
                if tensor.buffer == 0 or data is None or len(data) == 0:
                    continue
                if index in taken:
                    copy_t = copy.deepcopy(tensor)
                    subgraph.tensors.append(copy_t)
                    inputs[position] = len(subgraph.tensors) - 1
                taken.add(index)
            op.inputs = np.array(inputs, np.int32)
        owners = set()
        for tensor in subgraph.tensors:
            data = model_t.buffers[tensor.buffer].data
            if tensor.buffer == 0 or data is None or len(data) == 0:
                continue
            if tensor.buffer in owners:
                tensor.buffer = _add_buffer(model_t, np.asarray(data, np.uint8).copy())
            owners.add(tensor.buffer)
    for signature in model_t.signatureDefs or []:
        subgraph = model_t.subgraphs[signature.subgraphIndex]
        for entry in signature.inputs:
            tensor = subgraph.tensors[entry.tensorIndex]
            if _text(entry.name) in ranges and tensor.type in (schema.TensorType.INT32,
                                                               schema.TensorType.INT64):
                low, high = ranges[_text(entry.name)]
                tensor.quantization = schema.QuantizationParametersT()
                tensor.quantization.min, tensor.quantization.max = [low], [high]
    return _pack(model_t)


def int16_sums(flatbuffer: bytes, calibrated: bytes) -> bytes:
    """Each int16 ``SUM`` over the last axis (Bahdanau's score) of a 16x8
    flatbuffer in its calibrated range, as a ``FULLY_CONNECTED`` with
    weights of ones.

    TensorFlow's 16x8 quantizer gives a ``SUM``'s output its input's
    scale, and LiteRT's int16 ``SUM`` adds the raw values without
    rescaling: a translator's attention scores came out clipped, 4.8 off on
    a range of 5.5. The output gets the range ``calibrated`` (the float
    flatbuffer with the calibration's ranges, tensors matched by name)
    recorded, as do the ops that only pass it on (``REDUCE_MAX``,
    ``REDUCE_MIN``, moves); a matmul with ones rescales as it adds.
    """
    ranges = {}
    calibrated_t = _load(calibrated)
    for subgraph in calibrated_t.subgraphs:
        for tensor in subgraph.tensors:
            q = tensor.quantization
            if tensor.name and q is not None and q.min is not None and len(q.min) == 1:
                ranges[_text(tensor.name)] = max(abs(float(q.min[0])), abs(float(q.max[0])))
    model_t = _load(flatbuffer)
    for subgraph in model_t.subgraphs:
        _int16_sums(model_t, subgraph, ranges)
    return _pack(model_t)


def _int16_sums(model_t, subgraph, ranges: dict[str, float]) -> None:
    schema = _schema()
    int16 = schema.TensorType.INT16
    readers = _readers(subgraph)
    operators = []
    for op in subgraph.operators:
        operators.append(op)
        if _builtin_code(model_t, op) != schema.BuiltinOperator.SUM:
            continue
        source, target = subgraph.tensors[op.inputs[0]], subgraph.tensors[op.outputs[0]]
        axis_tensor = subgraph.tensors[op.inputs[1]]
        axis_data = model_t.buffers[axis_tensor.buffer].data
        if source.type != int16 or target.type != int16 or axis_data is None:
            continue
        rank = len(source.shape)
        axes = np.frombuffer(np.asarray(axis_data, np.uint8).tobytes(), np.int32)
        bound = ranges.get(_text(target.name or ""))
        if sorted({int(a) % rank for a in axes}) != [rank - 1] or not bound:
            continue
        _rescaled(model_t, subgraph, int(op.outputs[0]), bound / 32767, readers)
        ones_scale = schema.QuantizationParametersT()
        ones_scale.scale, ones_scale.zeroPoint = [1.0 / 127], [0]
        ones = _add_tensor(model_t, subgraph, np.full((1, int(source.shape[-1])), 127, np.int8),
                           schema.TensorType.INT8, None, ones_scale)
        keep_dims = bool(op.builtinOptions is not None and op.builtinOptions.keepDims)
        summed = int(op.outputs[0])
        if not keep_dims:  # the matmul keeps a last axis of 1; a RESHAPE drops it
            tensor = schema.TensorT()
            tensor.shape = np.array([*source.shape[:-1], 1], np.int32)
            tensor.type, tensor.buffer = int16, 0
            tensor.quantization = copy.deepcopy(target.quantization)
            subgraph.tensors.append(tensor)
            summed = len(subgraph.tensors) - 1
            shape = _add_tensor(model_t, subgraph, np.array(target.shape, np.int32),
                                schema.TensorType.INT32, None)
            reshape = _op(model_t, schema.BuiltinOperator.RESHAPE, [summed, shape],
                          [int(op.outputs[0])])
            operators.append(reshape)
        op.opcodeIndex = _opcode_index(model_t, schema.BuiltinOperator.FULLY_CONNECTED)
        op.inputs = np.array([int(op.inputs[0]), ones, -1], np.int32)
        op.outputs = np.array([summed], np.int32)
        op.builtinOptionsType = schema.BuiltinOptions.FullyConnectedOptions
        op.builtinOptions = schema.FullyConnectedOptionsT()
        op.builtinOptions.keepNumDims = True
    subgraph.operators = operators


def _selects_in_one_scale(model_t, subgraph) -> None:
    schema = _schema()
    selects = {schema.BuiltinOperator.SELECT_V2, schema.BuiltinOperator.SELECT}
    integers = (schema.TensorType.INT8, schema.TensorType.INT16)
    operators = []
    for op in subgraph.operators:
        output = subgraph.tensors[op.outputs[0]] if len(op.outputs) else None
        if (_builtin_code(model_t, op) in selects and output.type in integers
                and output.quantization is not None and output.quantization.scale is not None):
            inputs = [int(i) for i in op.inputs]
            for position in (1, 2):
                source = subgraph.tensors[inputs[position]]
                if (source.quantization.scale[0] != output.quantization.scale[0]
                        or source.quantization.zeroPoint[0] != output.quantization.zeroPoint[0]):
                    again = _activation(subgraph, source, output.type)
                    subgraph.tensors[again].quantization = copy.deepcopy(output.quantization)
                    operators.append(_op(model_t, schema.BuiltinOperator.QUANTIZE,
                                         [inputs[position]], [again]))
                    inputs[position] = again
            op.inputs = np.array(inputs, np.int32)
        operators.append(op)
    subgraph.operators = operators


def _int16_squared_differences(model_t, subgraph) -> None:
    schema = _schema()
    operators = []
    for op in subgraph.operators:
        output = subgraph.tensors[op.outputs[0]] if len(op.outputs) else None
        if (_builtin_code(model_t, op) != schema.BuiltinOperator.SQUARED_DIFFERENCE
                or output.type != schema.TensorType.INT16):
            operators.append(op)
            continue
        difference = _activation(subgraph, output, schema.TensorType.INT16)
        quantization = schema.QuantizationParametersT()
        bound = float(output.quantization.scale[0]) * 32767
        quantization.scale, quantization.zeroPoint = [np.sqrt(bound) / 32767], [0]
        subgraph.tensors[difference].quantization = quantization
        operators.append(_op(model_t, schema.BuiltinOperator.SUB, list(op.inputs), [difference]))
        operators[-1].builtinOptionsType = schema.BuiltinOptions.SubOptions
        operators[-1].builtinOptions = schema.SubOptionsT()
        op.opcodeIndex = _opcode_index(model_t, schema.BuiltinOperator.MUL)
        op.inputs = np.array([difference, difference], np.int32)
        op.builtinOptionsType = schema.BuiltinOptions.MulOptions
        op.builtinOptions = schema.MulOptionsT()
        operators.append(op)
    subgraph.operators = operators


def _zeros_scaled(model_t, subgraph) -> None:
    integers = (_schema().TensorType.INT8, _schema().TensorType.INT16)
    for op in subgraph.operators:
        output = subgraph.tensors[op.outputs[0]] if len(op.outputs) else None
        if output is None or output.quantization is None or output.quantization.scale is None:
            continue
        for i in (int(i) for i in op.inputs if i >= 0):
            tensor = subgraph.tensors[i]
            quantization = tensor.quantization
            data = model_t.buffers[tensor.buffer].data
            if (tensor.type in integers and data is not None and quantization is not None
                    and quantization.scale is not None and len(quantization.scale) == 1
                    and quantization.scale[0] == 0 and not np.any(np.asarray(data))):
                quantization.scale = [float(output.quantization.scale[0])]
                quantization.zeroPoint = [0]


# Ops whose int16 output keeps their input's scale (the first input).
_PASSING_ON = ("REDUCE_MAX", "REDUCE_MIN", *_MOVES)


def _rescaled(model_t, subgraph, index: int, scale: float, readers) -> None:
    """Tensor ``index`` in ``scale``, and so the outputs of the ops that
    pass it on in the scale it had."""
    tensor = subgraph.tensors[index]
    before = float(tensor.quantization.scale[0])
    tensor.quantization.scale, tensor.quantization.zeroPoint = [scale], [0]
    passing = {getattr(_schema().BuiltinOperator, name) for name in _PASSING_ON}
    for reader in readers.get(index, []):
        if _builtin_code(model_t, reader) not in passing:
            continue
        for output in (int(o) for o in reader.outputs):
            quantization = subgraph.tensors[output].quantization
            if (quantization is not None and quantization.scale is not None
                    and len(quantization.scale) == 1
                    and float(quantization.scale[0]) == before):
                _rescaled(model_t, subgraph, output, scale, readers)


def _readers(subgraph) -> dict[int, list]:
    readers: dict[int, list] = {}
    for op in subgraph.operators:
        for i in op.inputs:
            readers.setdefault(int(i), []).append(op)
    return readers


def _read_by_quantizes_only(model_t, subgraph, op, readers) -> bool:
    quantize = _schema().BuiltinOperator.QUANTIZE
    return (not {int(o) for o in op.outputs} & {int(i) for i in subgraph.outputs}
            and all(_builtin_code(model_t, reader) == quantize
                    for o in op.outputs for reader in readers.get(int(o), [])))


def _dequantized(model_t, subgraph, index: int, producer) -> int | None:
    """The integer tensor whose DEQUANTIZE is float tensor ``index`` (else None)."""
    source_op = producer.get(index)
    if (subgraph.tensors[index].type != _schema().TensorType.FLOAT32 or source_op is None
            or _builtin_code(model_t, source_op) != _schema().BuiltinOperator.DEQUANTIZE):
        return None
    return int(source_op.inputs[0])


def _integer_moves(model_t, subgraph) -> bool:
    schema = _schema()
    codes = {getattr(schema.BuiltinOperator, name): index for name, index in _MOVES.items()}
    producer = {int(o): op for op in subgraph.operators for o in op.outputs}
    readers = _readers(subgraph)
    edges = {int(i) for i in subgraph.outputs}
    changed, operators = False, []
    for op in subgraph.operators:
        operators.append(op)
        code = _builtin_code(model_t, op)
        if code not in codes:
            continue
        source = _dequantized(model_t, subgraph, int(op.inputs[codes[code]]), producer)
        if source is None or {int(o) for o in op.outputs} & edges:
            continue
        op.inputs = np.array(op.inputs, np.int32)
        op.inputs[codes[code]] = source
        for o in (int(o) for o in op.outputs):
            output = subgraph.tensors[o]
            output.type = subgraph.tensors[source].type
            output.quantization = copy.deepcopy(subgraph.tensors[source].quantization)
            floating = [r for r in readers.get(o, [])
                        if _builtin_code(model_t, r) != schema.BuiltinOperator.QUANTIZE]
            if floating:  # they read it in float, through a DEQUANTIZE of their own
                again = _activation(subgraph, output, schema.TensorType.FLOAT32)
                operators.append(_op(model_t, schema.BuiltinOperator.DEQUANTIZE, [o], [again]))
                for reader in floating:
                    reader.inputs = np.array([again if int(i) == o else int(i)
                                              for i in reader.inputs], np.int32)
        changed = True
    subgraph.operators = operators
    return changed


def _integer_arithmetic(model_t, subgraph) -> bool:
    schema = _schema()
    codes = {getattr(schema.BuiltinOperator, name) for name in _ARITHMETIC}
    producer = {int(o): op for op in subgraph.operators for o in op.outputs}
    readers = _readers(subgraph)
    edges = {int(i) for i in subgraph.outputs}
    taken, changed = set(), False
    for op in subgraph.operators:
        code = _builtin_code(model_t, op)
        if code not in codes or len(op.outputs) != 1:
            continue
        sources = [_dequantized(model_t, subgraph, int(i), producer) for i in op.inputs]
        after = readers.get(int(op.outputs[0]), [])
        if (None in sources or int(op.outputs[0]) in edges or len(after) != 1
                or _builtin_code(model_t, after[0]) != schema.BuiltinOperator.QUANTIZE):
            continue
        target = int(after[0].outputs[0])
        kind = subgraph.tensors[target].type
        if any(subgraph.tensors[i].type != kind for i in sources):
            continue
        if code == schema.BuiltinOperator.NEG:
            bound = {schema.TensorType.INT8: 127, schema.TensorType.INT16: 32767}[kind]
            quantization = schema.QuantizationParametersT()
            quantization.scale, quantization.zeroPoint = [1.0 / bound], [0]
            minus_one = _add_tensor(model_t, subgraph,
                                    np.array(-bound, np.int8 if bound == 127 else np.int16),
                                    kind, "minus_one", quantization)
            sources.append(minus_one)
            op.opcodeIndex = _opcode_index(model_t, schema.BuiltinOperator.MUL)
            op.builtinOptionsType = schema.BuiltinOptions.MulOptions
            op.builtinOptions = schema.MulOptionsT()
        elif code == schema.BuiltinOperator.SQUARE:  # no integer kernel: x * x
            sources.append(sources[0])
            op.opcodeIndex = _opcode_index(model_t, schema.BuiltinOperator.MUL)
            op.builtinOptionsType = schema.BuiltinOptions.MulOptions
            op.builtinOptions = schema.MulOptionsT()
        op.inputs = np.array(sources, np.int32)
        op.outputs = np.array([target], np.int32)
        taken.add(id(after[0]))
        changed = True
    subgraph.operators = [op for op in subgraph.operators if id(op) not in taken]
    return changed


def _integer_selects(model_t, subgraph) -> bool:
    schema = _schema()
    kinds = {schema.TensorType.INT8: (np.int8, -128, 127),
             schema.TensorType.INT16: (np.int16, -32768, 32767)}
    selects = {schema.BuiltinOperator.SELECT_V2, schema.BuiltinOperator.SELECT}
    quantize = schema.BuiltinOperator.QUANTIZE
    producer = {int(o): op for op in subgraph.operators for o in op.outputs}
    readers = _readers(subgraph)
    edges = {int(i) for i in subgraph.outputs}
    before, taken, changed = {}, set(), False  # ops to insert before an op; to drop
    for op in subgraph.operators:
        output = int(op.outputs[0])
        if (_builtin_code(model_t, op) not in selects or output in edges
                or subgraph.tensors[output].type != schema.TensorType.FLOAT32):
            continue
        sources = [_dequantized(model_t, subgraph, int(i), producer) for i in op.inputs[1:]]
        known = [subgraph.tensors[i].type for i in sources if i is not None]
        after = readers.get(output, [])
        if len(after) == 1 and _builtin_code(model_t, after[0]) == quantize:
            target = subgraph.tensors[after[0].outputs[0]]
            quantization, kind = copy.deepcopy(target.quantization), target.type
        elif (known and known[0] == schema.TensorType.INT16
              and subgraph.tensors[output].quantization is not None
              and subgraph.tensors[output].quantization.min is not None):
            # int16's symmetric scale over the calibrated range
            recorded = subgraph.tensors[output].quantization
            quantization, kind = schema.QuantizationParametersT(), known[0]
            bound = max(abs(float(recorded.min[0])), abs(float(recorded.max[0])), 1e-9)
            quantization.scale, quantization.zeroPoint = [bound / 32767], [0]
        else:
            continue
        if kind not in kinds or any(k != kind for k in known):
            continue
        dtype, low, high = kinds[kind]
        scale, zero = float(quantization.scale[0]), int(quantization.zeroPoint[0])
        inputs, requantizes = [int(op.inputs[0])], []
        for index, source in zip((int(i) for i in op.inputs[1:]), sources):
            data = model_t.buffers[subgraph.tensors[index].buffer].data
            if source is not None:
                if float(subgraph.tensors[source].quantization.scale[0]) != scale:
                    again = _activation(subgraph, subgraph.tensors[source], kind)
                    subgraph.tensors[again].quantization = copy.deepcopy(quantization)
                    requantizes.append(_op(model_t, quantize, [source], [again]))
                    source = again
                inputs.append(source)
            elif data is not None and len(data) and index not in producer:
                value = np.frombuffer(np.asarray(data, np.uint8).tobytes(), np.float32)
                value = np.clip(np.round(value / scale) + zero, low, high).astype(dtype)
                inputs.append(_add_tensor(model_t, subgraph,
                                          value.reshape(subgraph.tensors[index].shape), kind,
                                          None, copy.deepcopy(quantization)))
            else:
                break
        else:
            op.inputs = np.array(inputs, np.int32)
            before.setdefault(id(op), []).extend(requantizes)
            changed = True
            if len(after) == 1 and _builtin_code(model_t, after[0]) == quantize:
                op.outputs = np.array([int(after[0].outputs[0])], np.int32)  # its QUANTIZE's
                taken.add(id(after[0]))
                continue
            tensor = subgraph.tensors[output]
            tensor.type, tensor.quantization = kind, quantization
            for reader in after:  # a QUANTIZE now requantizes; a float op reads a DEQUANTIZE
                if _builtin_code(model_t, reader) == quantize:
                    continue
                again = _activation(subgraph, tensor, schema.TensorType.FLOAT32)
                before.setdefault(id(reader), []).append(
                    _op(model_t, schema.BuiltinOperator.DEQUANTIZE, [output], [again]))
                reader.inputs = np.array([again if int(i) == output else int(i)
                                          for i in reader.inputs], np.int32)
    subgraph.operators = [new for op in subgraph.operators if id(op) not in taken
                          for new in [*before.get(id(op), []), op]]
    return changed


_COMPARISONS = ("LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL")


def _integer_comparisons(model_t, subgraph) -> bool:
    schema = _schema()
    kinds = {schema.TensorType.INT8: (np.int8, -128, 127),
             schema.TensorType.INT16: (np.int16, -32768, 32767)}
    codes = {getattr(schema.BuiltinOperator, name) for name in _COMPARISONS}
    producer = {int(o): op for op in subgraph.operators for o in op.outputs}
    changed = False
    for op in subgraph.operators:
        if _builtin_code(model_t, op) not in codes or len(op.inputs) != 2:
            continue
        inputs = [int(i) for i in op.inputs]
        sources = [_dequantized(model_t, subgraph, i, producer) for i in inputs]
        if sorted(s is None for s in sources) != [False, True]:
            continue
        known = next(s for s in sources if s is not None)
        other = inputs[sources.index(None)]
        data = model_t.buffers[subgraph.tensors[other].buffer].data
        kind = subgraph.tensors[known].type
        if (kind not in kinds or data is None or not len(data) or other in producer
                or subgraph.tensors[other].type != schema.TensorType.FLOAT32):
            continue
        dtype, low, high = kinds[kind]
        quantization = subgraph.tensors[known].quantization
        scale, zero = float(quantization.scale[0]), int(quantization.zeroPoint[0])
        value = np.frombuffer(np.asarray(data, np.uint8).tobytes(), np.float32)
        value = np.clip(np.round(value / scale) + zero, low, high).astype(dtype)
        constant = _add_tensor(model_t, subgraph,
                               value.reshape(() if subgraph.tensors[other].shape is None
                                             else subgraph.tensors[other].shape),
                               kind, None, copy.deepcopy(quantization))
        op.inputs = np.array([known if s is not None else constant for s in sources], np.int32)
        changed = True
    return changed


def _activation(subgraph, like, tensor_type: int) -> int:
    """A new data-less tensor of ``like``'s shape."""
    tensor = _schema().TensorT()
    tensor.shape = None if like.shape is None else np.array(like.shape, np.int32)
    tensor.shapeSignature = like.shapeSignature
    tensor.type = tensor_type
    tensor.name = None
    tensor.buffer = 0
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1


def _op(model_t, builtin_code: int, inputs: list[int], outputs: list[int]):
    op = _schema().OperatorT()
    op.opcodeIndex = _opcode_index(model_t, builtin_code)
    op.inputs = np.array(inputs, np.int32)
    op.outputs = np.array(outputs, np.int32)
    return op


def _integer_bool_casts(model_t, subgraph) -> None:
    schema = _schema()
    kinds = {schema.TensorType.INT8: (np.int8, -128, 127),
             schema.TensorType.INT16: (np.int16, -32768, 32767)}
    readers = _readers(subgraph)
    operators = []
    for op in subgraph.operators:
        if (_builtin_code(model_t, op) != schema.BuiltinOperator.CAST
                or subgraph.tensors[op.inputs[0]].type != schema.TensorType.BOOL
                or subgraph.tensors[op.outputs[0]].type != schema.TensorType.FLOAT32
                or not _read_by_quantizes_only(model_t, subgraph, op, readers)
                or any(subgraph.tensors[q.outputs[0]].type not in kinds
                       for q in readers.get(int(op.outputs[0]), []))):
            operators.append(op)
            continue
        for quantize in readers.get(int(op.outputs[0]), []):
            output = subgraph.tensors[quantize.outputs[0]]
            dtype, low, high = kinds[output.type]
            scale, zero = float(output.quantization.scale[0]), int(output.quantization.zeroPoint[0])
            one, nought = (
                _add_tensor(model_t, subgraph,
                            np.array(np.clip(round(v / scale) + zero, low, high), dtype),
                            output.type, name, copy.deepcopy(output.quantization))
                for v, name in ((1.0, "one"), (0.0, "zero")))
            quantize.opcodeIndex = _opcode_index(model_t, schema.BuiltinOperator.SELECT_V2)
            quantize.inputs = np.array([op.inputs[0], one, nought], np.int32)
            quantize.builtinOptionsType = schema.BuiltinOptions.SelectV2Options
            quantize.builtinOptions = schema.SelectV2OptionsT()
    subgraph.operators = operators


def _builtin_code(model_t, op) -> int:
    code = model_t.operatorCodes[op.opcodeIndex]
    return max(code.builtinCode, code.deprecatedBuiltinCode)


def _matching_layers(model_t, subgraph, op, layers: dict[str, FusedLayer]) -> list[str]:
    """The routed layer calls whose weights are this op's (same edit if several)."""
    errors = {key: _weights_error(model_t, subgraph, op, layer) for key, layer in layers.items()}
    # Float32 weights are equal; float16 and int8 ones are within 1% of the range.
    matches = sorted((key for key, error in errors.items() if error < 1e-2), key=errors.get)
    if not matches:
        raise RuntimeError(
            "convert_fused_lstm: a fused LSTM op matches none of the routed layers "
            f"({', '.join(layer.name for layer in layers.values())})."
        )
    first = layers[matches[0]]
    if any(not first.same_edit(layers[key]) for key in matches[1:]):
        raise RuntimeError(
            "convert_fused_lstm: a fused LSTM op matches layers with different peephole "
            f"or CIFG settings ({', '.join(layers[key].name for key in matches)}); "
            "they have the same weights, so the op cannot be told apart."
        )
    return matches


def _weights_error(model_t, subgraph, op, layer: FusedLayer) -> float:
    """Largest relative difference between the op's weights and the layer's."""
    error = 0.0
    for index, expected in layer.weights.items():
        value = _constant_value(model_t, subgraph, op.inputs[index])
        if value is None or value.shape != expected.shape:
            return np.inf
        scale = max(float(np.max(np.abs(expected), initial=0.0)), 1e-6)
        error = max(error, float(np.max(np.abs(value - expected), initial=0.0)) / scale)
    return error


def _constant_value(model_t, subgraph, index: int) -> np.ndarray | None:
    """A constant tensor's float value (through a DEQUANTIZE op, int8 scales applied)."""
    schema = _schema()
    if index < 0:
        return None
    tensor = subgraph.tensors[index]
    data = model_t.buffers[tensor.buffer].data
    if data is None or len(data) == 0:
        for producer in subgraph.operators:
            if index in producer.outputs:
                if _builtin_code(model_t, producer) == schema.BuiltinOperator.DEQUANTIZE:
                    return _constant_value(model_t, subgraph, producer.inputs[0])
                return None
        return None
    dtype = {
        schema.TensorType.FLOAT32: np.float32,
        schema.TensorType.FLOAT16: np.float16,
        schema.TensorType.INT8: np.int8,
    }.get(tensor.type)
    if dtype is None:
        return None
    shape = [] if tensor.shape is None else list(tensor.shape)
    value = np.frombuffer(np.asarray(data, np.uint8).tobytes(), dtype).astype(np.float32)
    value = value.reshape(shape)
    quantization = tensor.quantization
    if (
        tensor.type == schema.TensorType.INT8
        and quantization is not None
        and quantization.scale is not None
    ):
        scale = np.asarray(quantization.scale, np.float32)
        zero_point = np.asarray(
            quantization.zeroPoint if quantization.zeroPoint is not None else 0, np.float32
        )
        if scale.size > 1:  # per-channel
            broadcast = [1] * value.ndim
            broadcast[quantization.quantizedDimension] = -1
            scale, zero_point = scale.reshape(broadcast), zero_point.reshape(broadcast)
        value = (value - zero_point) * scale
    return value


def _add_buffer(model_t, array: np.ndarray) -> int:
    buffer = _schema().BufferT()
    buffer.data = np.frombuffer(np.ascontiguousarray(array).tobytes(), np.uint8)
    model_t.buffers.append(buffer)
    return len(model_t.buffers) - 1


def _add_tensor(model_t, subgraph, array, tensor_type, name: str, quantization=None) -> int:
    tensor = _schema().TensorT()
    tensor.shape = np.array(array.shape, np.int32)
    tensor.type = tensor_type
    tensor.name = name
    tensor.buffer = _add_buffer(model_t, array)
    tensor.quantization = quantization
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1


def _add_constant(model_t, subgraph, vector: np.ndarray, weights_type: int) -> int:
    """A peephole vector in the type of the op's other weights (float32 or int8)."""
    schema = _schema()
    vector = np.asarray(vector, np.float32)
    if weights_type == schema.TensorType.FLOAT32:
        return _add_tensor(model_t, subgraph, vector, weights_type, "peephole")
    if weights_type == schema.TensorType.INT8:
        # Symmetric per-tensor scale, as the converter quantizes the weights.
        scale = max(float(np.max(np.abs(vector), initial=0.0)), 1e-12) / 127.0
        quantized = np.clip(np.round(vector / scale), -127, 127).astype(np.int8)
        quantization = schema.QuantizationParametersT()
        quantization.scale, quantization.zeroPoint = [scale], [0]
        return _add_tensor(model_t, subgraph, quantized, weights_type, "peephole", quantization)
    raise RuntimeError(
        f"convert_fused_lstm: unexpected LSTM weight type {weights_type} (float32 or int8)."
    )


def _without_unread_dequantizes(model_t, subgraph) -> list:
    """The subgraph's ops but the DEQUANTIZEs whose outputs nothing reads: with
    float16 weights, those that made the fused ops' former state tensors; in
    an integer model, those before a move made integer (`integer_only`)."""
    read = set(int(i) for i in subgraph.outputs)
    for op in subgraph.operators:
        read.update(int(i) for i in op.inputs if i >= 0)
    dequantize = _schema().BuiltinOperator.DEQUANTIZE
    return [op for op in subgraph.operators
            if _builtin_code(model_t, op) != dequantize or any(int(o) in read for o in op.outputs)]


def _own_state(model_t, subgraph, index: int) -> int:
    """A new variable tensor like tensor ``index``, for one fused op alone.

    The converter may give an LSTM op's zero state and another op's zeros
    (the initial state of a recurrent layer after it) one tensor; the op
    writes its final state into it, which the other op then reads instead
    of zeros.
    """
    schema = _schema()
    source = subgraph.tensors[index]
    tensor = schema.TensorT()
    tensor.shape = np.array(source.shape, np.int32)
    tensor.shapeSignature = source.shapeSignature
    tensor.type = source.type
    tensor.name = "state"
    tensor.quantization = source.quantization
    tensor.isVariable = True
    model_t.buffers.append(schema.BufferT())
    tensor.buffer = len(model_t.buffers) - 1
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1


def _fill_zeros(model_t, subgraph, state_index: int):
    """A ``FILL`` op that writes zeros into a state tensor before the LSTM op runs."""
    schema = _schema()
    state = subgraph.tensors[state_index]
    dtype = {
        schema.TensorType.FLOAT32: np.float32,
        schema.TensorType.INT16: np.int16,
        schema.TensorType.INT8: np.int8,
    }[state.type]
    dims = _add_tensor(
        model_t, subgraph, np.array(state.shape, np.int32), schema.TensorType.INT32, "state_shape"
    )
    zero = _add_tensor(model_t, subgraph, np.zeros((), dtype), state.type, "zero")
    op = schema.OperatorT()
    op.opcodeIndex = _opcode_index(model_t, schema.BuiltinOperator.FILL)
    op.inputs = np.array([dims, zero], np.int32)
    op.outputs = np.array([state_index], np.int32)
    op.builtinOptionsType = schema.BuiltinOptions.FillOptions
    op.builtinOptions = schema.FillOptionsT()
    return op


def _opcode_index(model_t, builtin_code: int) -> int:
    for index, code in enumerate(model_t.operatorCodes):
        if max(code.builtinCode, code.deprecatedBuiltinCode) == builtin_code:
            return index
    code = _schema().OperatorCodeT()
    code.builtinCode = builtin_code
    code.deprecatedBuiltinCode = min(builtin_code, 127)  # PLACEHOLDER_FOR_GREATER_OP_CODES
    code.version = 1
    model_t.operatorCodes.append(code)
    return len(model_t.operatorCodes) - 1


def _drop_unused_tensors_and_buffers(model_t) -> None:
    """Removes the tensors no op uses any more (CIFG's zero input gate) and their buffers."""
    for s, subgraph in enumerate(model_t.subgraphs):
        used = set(subgraph.inputs) | set(subgraph.outputs)
        for op in subgraph.operators:
            for indices in (op.inputs, op.outputs, op.intermediates):
                if indices is not None:
                    used.update(int(i) for i in indices if i >= 0)
        new_index = {old: new for new, old in enumerate(sorted(used))}
        subgraph.tensors = [subgraph.tensors[old] for old in sorted(used)]

        for op in subgraph.operators:
            op.inputs, op.outputs, op.intermediates = (
                _remap(op.inputs, new_index),
                _remap(op.outputs, new_index),
                _remap(op.intermediates, new_index),
            )
        subgraph.inputs = _remap(subgraph.inputs, new_index)
        subgraph.outputs = _remap(subgraph.outputs, new_index)
        for signature in model_t.signatureDefs or []:
            if signature.subgraphIndex == s:
                for tensor_map in (signature.inputs or []) + (signature.outputs or []):
                    tensor_map.tensorIndex = new_index[tensor_map.tensorIndex]

    used_buffers = {0}  # buffer 0 is the empty sentinel
    used_buffers.update(t.buffer for subgraph in model_t.subgraphs for t in subgraph.tensors)
    used_buffers.update(m.buffer for m in model_t.metadata or [])
    used_buffers.update(
        int(b) for b in (model_t.metadataBuffer if model_t.metadataBuffer is not None else [])
    )
    new_buffer = {old: new for new, old in enumerate(sorted(used_buffers))}
    model_t.buffers = [model_t.buffers[old] for old in sorted(used_buffers)]
    for subgraph in model_t.subgraphs:
        for tensor in subgraph.tensors:
            tensor.buffer = new_buffer[tensor.buffer]
    for metadata in model_t.metadata or []:
        metadata.buffer = new_buffer[metadata.buffer]
    if model_t.metadataBuffer is not None:
        model_t.metadataBuffer = [new_buffer[int(b)] for b in model_t.metadataBuffer]


def _remap(indices, new_index: dict[int, int]):
    if indices is None:
        return None
    return np.array([new_index[int(i)] if i >= 0 else -1 for i in indices], np.int32)
