"""Edits of the TFLite flatbuffer that `keras_seq.export.lstm_fusion` converts.

The converter's ``UNIDIRECTIONAL_SEQUENCE_LSTM`` ops are plain LSTMs with a
cell clip and a state kept between invokes; `edit_fused_ops` makes each one
compute its Keras layer (matched by its weights): peephole inputs, CIFG, no
cell clip, a zero state at the start of every ``invoke()``.
`inputs_outputs_in_call_order` undoes the SavedModel route's ordering of
inputs and outputs by signature key. `integer_lstm_states_agree` mends the
scales of an integer fused op's hidden state. `compacted` gives an unrolled
model's repeated constants one tensor. All work on the object API of
``ai_edge_litert.schema_py_generated`` and write a new flatbuffer; the
helpers without an underscore (`load_model`, `add_tensor`, ...) are that
API's, shared with `keras_seq.export._integer_mends`.

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


def schema_module():
    from ai_edge_litert import schema_py_generated

    return schema_py_generated


def load_model(flatbuffer: bytes):
    schema = schema_module()
    return schema.ModelT.InitFromObj(schema.Model.GetRootAs(flatbuffer, 0))


def pack_model(model_t) -> bytes:
    builder = flatbuffers.Builder(0)
    builder.Finish(model_t.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def inputs_outputs_in_call_order(flatbuffer: bytes, input_names: list[str]) -> bytes:
    """Puts the main subgraph's inputs in signature order and outputs in call order.

    The SavedModel route orders them by signature key ("output_10" before
    "output_2"); the signature def maps keys to tensors.
    """
    model_t = load_model(flatbuffer)
    if not model_t.signatureDefs:
        return flatbuffer
    signature = model_t.signatureDefs[0]
    subgraph = model_t.subgraphs[signature.subgraphIndex]
    inputs = {as_text(t.name): t.tensorIndex for t in signature.inputs}
    outputs = {as_text(t.name): t.tensorIndex for t in signature.outputs}
    if sorted(inputs) == sorted(input_names):
        subgraph.inputs = np.array([inputs[name] for name in input_names], np.int32)
    keys = [f"output_{i}" for i in range(len(outputs))]
    if sorted(outputs) == sorted(keys):
        subgraph.outputs = np.array([outputs[key] for key in keys], np.int32)
    return pack_model(model_t)


def compacted(flatbuffer: bytes) -> bytes:
    """The same integer model in fewer bytes: one tensor per distinct
    constant in each subgraph, one buffer per distinct constant's bytes in
    the model, names only on the main graph's inputs and outputs (none on
    a loop's subgraphs), no calibrated ranges, one condition subgraph for
    loops whose conditions are the same, every tensor without data on the
    empty buffer 0.

    An unrolled loop reads its weights at every step, and the converter
    gives each read a tensor of its own with its own copy of the
    per-channel scales (int8): for a 64-unit encoder over 31 positions,
    more bytes than the weights. A loop's subgraphs repeat the main
    graph's small constants (shapes, indices, zeros). The calibrated
    ranges (``min``, ``max``) go too: a runtime reads a tensor's scale and
    zero point.
    """
    model_t = load_model(flatbuffer)
    owner = {}  # a constant's bytes -> its first buffer
    for subgraph in model_t.subgraphs:
        for tensor in subgraph.tensors:
            if tensor.quantization is not None:
                tensor.quantization.min = tensor.quantization.max = None
            data = model_t.buffers[tensor.buffer].data
            if not tensor.isVariable and data is not None and len(data):
                tensor.buffer = owner.setdefault(np.asarray(data, np.uint8).tobytes(),
                                                 tensor.buffer)
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
        # The main graph's inputs and outputs keep their names (the
        # signature's); no other tensor needs one, nor a loop's subgraph.
        edges = ({int(i) for i in subgraph.inputs} | {int(i) for i in subgraph.outputs}
                 if subgraph is model_t.subgraphs[0] else set())
        for index, tensor in enumerate(subgraph.tensors):
            if index not in edges:
                tensor.name = None  # no name at all: an empty one still takes 8+ bytes
        if subgraph is not model_t.subgraphs[0]:
            subgraph.name = None
    drop_unused(model_t)
    _shared_loop_conditions(model_t)
    return pack_model(model_t)


def _shared_loop_conditions(model_t) -> None:
    """Loops whose conditions are the same (a Bidirectional's two
    directions: ``counter < limit``) share one condition subgraph. A
    condition's inputs that it does not read (the values the loop carries)
    lose their scales first: nothing reads them there."""
    schema = schema_module()
    loops = [op for subgraph in model_t.subgraphs for op in subgraph.operators
             if code_of(model_t, op) == schema.BuiltinOperator.WHILE]
    calls = {schema.BuiltinOperator.IF, schema.BuiltinOperator.CALL_ONCE,
             schema.BuiltinOperator.CALL}
    if len(loops) < 2 or any(code_of(model_t, op) in calls
                             for subgraph in model_t.subgraphs for op in subgraph.operators):
        return
    conditions = {op.builtinOptions.condSubgraphIndex for op in loops}
    bodies = {op.builtinOptions.bodySubgraphIndex for op in loops}
    if conditions & bodies:
        return
    first = {}  # a condition's key -> its first subgraph
    for index in sorted(conditions):
        condition = model_t.subgraphs[index]
        read = {int(i) for op in condition.operators for i in op.inputs}
        for i in condition.inputs:
            if int(i) not in read:
                condition.tensors[int(i)].quantization = None
        first.setdefault(_subgraph_key(condition), index)
    same = {index: first[_subgraph_key(model_t.subgraphs[index])] for index in conditions}
    dropped = sorted(index for index in conditions if same[index] != index)
    if not dropped:
        return
    kept = [i for i in range(len(model_t.subgraphs)) if i not in set(dropped)]
    new_index = {old: new for new, old in enumerate(kept)}
    for op in loops:
        options = op.builtinOptions
        options.condSubgraphIndex = new_index[same[options.condSubgraphIndex]]
        options.bodySubgraphIndex = new_index[options.bodySubgraphIndex]
    model_t.subgraphs = [model_t.subgraphs[i] for i in kept]


def _subgraph_key(subgraph) -> tuple:
    def array(values):
        return None if values is None else tuple(np.asarray(values).tolist())

    tensors = tuple((t.type, array(t.shape), array(t.shapeSignature), t.buffer,
                     _quantization_key(t.quantization), t.isVariable)
                    for t in subgraph.tensors)
    operators = tuple((op.opcodeIndex, array(op.inputs), array(op.outputs),
                       op.builtinOptionsType, repr(sorted(vars(op.builtinOptions).items()))
                       if op.builtinOptions is not None else None)
                      for op in subgraph.operators)
    return tensors, operators, array(subgraph.inputs), array(subgraph.outputs)


def _constant_key(tensor, data) -> tuple:
    shape = None if tensor.shape is None else tuple(np.asarray(tensor.shape).tolist())
    return (tensor.type, shape, _quantization_key(tensor.quantization),
            np.asarray(data, np.uint8).tobytes())


def _quantization_key(quantization) -> tuple | None:
    if quantization is None:
        return None
    return tuple(
        None if values is None else tuple(np.asarray(values).tolist())
        for values in (quantization.scale, quantization.zeroPoint,
                       quantization.min, quantization.max)
    ) + (quantization.quantizedDimension,)


def as_text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def edit_fused_ops(flatbuffer: bytes, layers: dict[str, FusedLayer]) -> bytes:
    """Sets peepholes, CIFG, cell clip 0 and a zero state on every fused op."""
    schema = schema_module()
    model_t = load_model(flatbuffer)
    fused = set()
    for subgraph in model_t.subgraphs:
        operators = []
        for op in subgraph.operators:
            if code_of(model_t, op) == schema.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM:
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
        subgraph.operators = without_unread_dequantizes(model_t, subgraph)
    missing = [layer.name for key, layer in layers.items() if key not in fused]
    if missing:
        raise RuntimeError(
            f"convert_fused_lstm: the converter did not fuse {', '.join(missing)}; "
            "without the fused op the peephole and CIFG edits cannot be applied."
        )
    drop_unused(model_t)
    return pack_model(model_t)


def builtin_op_count(flatbuffer: bytes, name: str) -> int:
    """How many ops of builtin ``name`` (e.g. ``"WHILE"``) the model has."""
    code = getattr(schema_module().BuiltinOperator, name)
    model_t = load_model(flatbuffer)
    return sum(code_of(model_t, op) == code
               for subgraph in model_t.subgraphs for op in subgraph.operators)


def integer_lstm_states_agree(flatbuffer: bytes) -> bytes:
    """Each integer fused LSTM op's hidden state in the scale of its output.

    Without a projection, TFLite's integer LSTM kernel writes h in the scale
    of its intermediate tensor 4 into its output-state tensor, reads that
    back as h(t-1) in the state tensor's scale, and copies the raw values
    out as its output (TFLite Micro's kernel copies the state out too).
    TensorFlow's quantizer can give the three different scales (the
    output's is shared with a CONCATENATION after it, a Bidirectional's):
    here they take the output's, and the ``FILL`` that zeroes the state
    writes that zero point.
    """
    schema = schema_module()
    model_t = load_model(flatbuffer)
    lstm = schema.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM
    fill = schema.BuiltinOperator.FILL
    integer = {schema.TensorType.INT8: np.int8, schema.TensorType.INT16: np.int16}
    for subgraph in model_t.subgraphs:
        fills = {int(op.outputs[0]): op for op in subgraph.operators
                 if code_of(model_t, op) == fill}
        for op in subgraph.operators:
            kind = subgraph.tensors[op.inputs[0]].type
            if (code_of(model_t, op) != lstm or op.intermediates is None
                    or len(op.intermediates) != 5 or kind not in integer):
                continue
            output = subgraph.tensors[op.outputs[0]].quantization
            state_index = int(op.inputs[_OUTPUT_STATE])
            for index in (state_index, int(op.intermediates[4])):
                subgraph.tensors[index].quantization = copy.deepcopy(output)
            if state_index in fills:  # a new zero: the old one may be shared
                zero = np.array(int(output.zeroPoint[0]), integer[kind])
                fills[state_index].inputs = np.array(
                    [fills[state_index].inputs[0],
                     add_tensor(model_t, subgraph, zero, kind, "zero",
                                copy.deepcopy(output))], np.int32)
    drop_unused(model_t)
    return pack_model(model_t)


def int16_lstm_biases_widened(flatbuffer: bytes) -> bytes:
    """Each 16x8 fused LSTM op's gate biases in int64.

    TensorFlow's MLIR quantizer writes them in int32; TFLite Micro's 16x8
    LSTM kernel, the only one, reads them as int64 (the values widened, the
    scale kept).
    """
    schema = schema_module()
    model_t = load_model(flatbuffer)
    lstm = schema.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM
    for subgraph in model_t.subgraphs:
        for op in subgraph.operators:
            if (code_of(model_t, op) != lstm
                    or subgraph.tensors[op.inputs[0]].type != schema.TensorType.INT16):
                continue
            for index in (int(op.inputs[i]) for i in GATE_BIAS.values()):
                tensor = subgraph.tensors[index] if index >= 0 else None
                if tensor is None or tensor.type != schema.TensorType.INT32:
                    continue
                data = np.asarray(model_t.buffers[tensor.buffer].data, np.uint8).tobytes()
                widened = np.frombuffer(data, np.int32).astype(np.int64)
                # A buffer of its own: the int32 one may be shared.
                tensor.buffer = add_buffer(model_t, widened)
                tensor.type = schema.TensorType.INT64
    drop_unused(model_t)
    return pack_model(model_t)


def code_of(model_t, op) -> int:
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
    schema = schema_module()
    if index < 0:
        return None
    tensor = subgraph.tensors[index]
    data = model_t.buffers[tensor.buffer].data
    if data is None or len(data) == 0:
        for producer in subgraph.operators:
            if index in producer.outputs:
                if code_of(model_t, producer) == schema.BuiltinOperator.DEQUANTIZE:
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


def add_buffer(model_t, array: np.ndarray) -> int:
    buffer = schema_module().BufferT()
    buffer.data = np.frombuffer(np.ascontiguousarray(array).tobytes(), np.uint8)
    model_t.buffers.append(buffer)
    return len(model_t.buffers) - 1


def add_tensor(model_t, subgraph, array, tensor_type, name: str, quantization=None) -> int:
    tensor = schema_module().TensorT()
    tensor.shape = np.array(array.shape, np.int32)
    tensor.type = tensor_type
    tensor.name = name
    tensor.buffer = add_buffer(model_t, array)
    tensor.quantization = quantization
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1


def add_activation(subgraph, tensor_type: int, shape, shape_signature=None,
                   quantization=None) -> int:
    """A new data-less tensor (an op's output) of ``shape``."""
    tensor = schema_module().TensorT()
    tensor.shape = None if shape is None else np.array(shape, np.int32)
    tensor.shapeSignature = shape_signature
    tensor.type = tensor_type
    tensor.buffer = 0
    tensor.quantization = quantization
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1


def _add_constant(model_t, subgraph, vector: np.ndarray, weights_type: int) -> int:
    """A peephole vector in the type of the op's other weights (float32 or int8)."""
    schema = schema_module()
    vector = np.asarray(vector, np.float32)
    if weights_type == schema.TensorType.FLOAT32:
        return add_tensor(model_t, subgraph, vector, weights_type, "peephole")
    if weights_type == schema.TensorType.INT8:
        # Symmetric per-tensor scale, as the converter quantizes the weights.
        scale = max(float(np.max(np.abs(vector), initial=0.0)), 1e-12) / 127.0
        quantized = np.clip(np.round(vector / scale), -127, 127).astype(np.int8)
        quantization = schema.QuantizationParametersT()
        quantization.scale, quantization.zeroPoint = [scale], [0]
        return add_tensor(model_t, subgraph, quantized, weights_type, "peephole", quantization)
    raise RuntimeError(
        f"convert_fused_lstm: unexpected LSTM weight type {weights_type} (float32 or int8)."
    )


def without_unread_dequantizes(model_t, subgraph) -> list:
    """The subgraph's ops but the DEQUANTIZEs whose outputs nothing reads: with
    float16 weights, those that made the fused ops' former state tensors; in
    an integer model, those before a move made integer (`integer_only`)."""
    read = set(int(i) for i in subgraph.outputs)
    for op in subgraph.operators:
        read.update(int(i) for i in op.inputs if i >= 0)
    dequantize = schema_module().BuiltinOperator.DEQUANTIZE
    return [op for op in subgraph.operators
            if code_of(model_t, op) != dequantize or any(int(o) in read for o in op.outputs)]


def _own_state(model_t, subgraph, index: int) -> int:
    """A new variable tensor like tensor ``index``, for one fused op alone.

    The converter may give an LSTM op's zero state and another op's zeros
    (the initial state of a recurrent layer after it) one tensor; the op
    writes its final state into it, which the other op then reads instead
    of zeros.
    """
    schema = schema_module()
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
    schema = schema_module()
    state = subgraph.tensors[state_index]
    dtype = {
        schema.TensorType.FLOAT32: np.float32,
        schema.TensorType.INT16: np.int16,
        schema.TensorType.INT8: np.int8,
    }[state.type]
    dims = add_tensor(
        model_t, subgraph, np.array(state.shape, np.int32), schema.TensorType.INT32, "state_shape"
    )
    zero = add_tensor(model_t, subgraph, np.zeros((), dtype), state.type, "zero")
    op = schema.OperatorT()
    op.opcodeIndex = opcode_index(model_t, schema.BuiltinOperator.FILL)
    op.inputs = np.array([dims, zero], np.int32)
    op.outputs = np.array([state_index], np.int32)
    op.builtinOptionsType = schema.BuiltinOptions.FillOptions
    op.builtinOptions = schema.FillOptionsT()
    return op


def new_operator(model_t, builtin_code: int, inputs: list[int], outputs: list[int]):
    """A builtin op reading tensors ``inputs`` into ``outputs``."""
    op = schema_module().OperatorT()
    op.opcodeIndex = opcode_index(model_t, builtin_code)
    op.inputs = np.array(inputs, np.int32)
    op.outputs = np.array(outputs, np.int32)
    return op


def opcode_index(model_t, builtin_code: int) -> int:
    for index, code in enumerate(model_t.operatorCodes):
        if max(code.builtinCode, code.deprecatedBuiltinCode) == builtin_code:
            return index
    code = schema_module().OperatorCodeT()
    code.builtinCode = builtin_code
    code.deprecatedBuiltinCode = min(builtin_code, 127)  # PLACEHOLDER_FOR_GREATER_OP_CODES
    code.version = 1
    model_t.operatorCodes.append(code)
    return len(model_t.operatorCodes) - 1


def drop_unused(model_t) -> None:
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
