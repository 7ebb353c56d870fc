"""What TensorFlow's integer quantizers leave in float or get wrong, mended
in the flatbuffer they write (the child process of
`keras_seq.export.integer_tflite` runs these).

`integer_only` makes integer what the quantizer leaves in float and need not
be, and, for 16x8, puts right what its quantizer gets wrong in the file;
`prepared_for_16x8` readies a float file for TensorFlow's 16x8 quantizer;
`int16_sums` gives a 16x8 ``SUM`` its calibrated range. All work on the
object API of ``ai_edge_litert.schema_py_generated``
(`keras_seq.export._flatbuffer`'s helpers) and write a new flatbuffer.

References: the kernels, ``tensorflow/lite/kernels/`` (``sub.cc``,
``reduce.cc``, ``select.cc``, ``comparisons.cc``).
"""

from __future__ import annotations

import copy

import numpy as np

from keras_seq.export._flatbuffer import (
    add_activation,
    add_buffer,
    add_tensor,
    as_text,
    code_of,
    drop_unused,
    load_model,
    new_operator,
    opcode_index,
    pack_model,
    schema_module,
    without_unread_dequantizes,
)

# Ops that move values without computing: the input of their values, by op.
_MOVES = {"SPLIT": 1, "SPLIT_V": 0, "STRIDED_SLICE": 0, "SLICE": 0, "RESHAPE": 0,
          "REVERSE_V2": 0}
# The integer activation types, as NumPy types.
_INTEGER_TYPES = {schema_module().TensorType.INT8: np.int8,
                  schema_module().TensorType.INT16: np.int16}
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
    - A ``CONCATENATION`` of dequantized tensors, read by one ``QUANTIZE``
      (a Bidirectional's two directions, after int8 loops): the integer
      kernel into that ``QUANTIZE``'s output, each input first requantized
      to its scale where they differ (TFLite Micro's kernel wants one
      scale); a model output still gets its float value, dequantized.
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
    model_t = load_model(flatbuffer)
    for subgraph in model_t.subgraphs:
        _zeros_scaled(model_t, subgraph)
        _int16_squared_differences(model_t, subgraph)
        _selects_in_one_scale(model_t, subgraph)
        while (_integer_moves(model_t, subgraph) | _integer_arithmetic(model_t, subgraph)
               | _integer_concatenations(model_t, subgraph)
               | _integer_selects(model_t, subgraph)
               | _integer_comparisons(model_t, subgraph)):
            subgraph.operators = without_unread_dequantizes(model_t, subgraph)
        _integer_bool_casts(model_t, subgraph)
        subgraph.operators = without_unread_dequantizes(model_t, subgraph)
    drop_unused(model_t)
    return pack_model(model_t)


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
    schema = schema_module()
    model_t = load_model(flatbuffer)
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
                tensor.buffer = add_buffer(model_t, np.asarray(data, np.uint8).copy())
            owners.add(tensor.buffer)
    for signature in model_t.signatureDefs or []:
        subgraph = model_t.subgraphs[signature.subgraphIndex]
        for entry in signature.inputs:
            tensor = subgraph.tensors[entry.tensorIndex]
            if as_text(entry.name) in ranges and tensor.type in (schema.TensorType.INT32,
                                                               schema.TensorType.INT64):
                low, high = ranges[as_text(entry.name)]
                tensor.quantization = schema.QuantizationParametersT()
                tensor.quantization.min, tensor.quantization.max = [low], [high]
    return pack_model(model_t)


def int16_sums(flatbuffer: bytes, calibrated: bytes) -> bytes:
    """Each int16 ``SUM`` of a 16x8 flatbuffer (Bahdanau's score, a sum over
    time) in its calibrated range, as a ``MEAN`` times the count.

    TensorFlow's 16x8 quantizer gives a ``SUM``'s output its input's
    scale, and LiteRT's int16 ``SUM`` adds the raw values without
    rescaling: a translator's attention scores came out clipped, 4.8 off on
    a range of 5.5, a sum over time 1.8 off on 5.4. The output gets the
    range ``calibrated`` (the float flatbuffer with the calibration's
    ranges, tensors matched by name)
    recorded, as do the ops that only pass it on (``REDUCE_MAX``,
    ``REDUCE_MIN``, moves); the int16 ``MEAN`` rescales, into that scale
    over the count, and a ``MUL`` by the count gives the sum.
    """
    ranges = {}
    calibrated_t = load_model(calibrated)
    for subgraph in calibrated_t.subgraphs:
        for tensor in subgraph.tensors:
            q = tensor.quantization
            if tensor.name and q is not None and q.min is not None and len(q.min) == 1:
                ranges[as_text(tensor.name)] = max(abs(float(q.min[0])), abs(float(q.max[0])))
    model_t = load_model(flatbuffer)
    for subgraph in model_t.subgraphs:
        _int16_sums(model_t, subgraph, ranges)
    return pack_model(model_t)


def _int16_sums(model_t, subgraph, ranges: dict[str, float]) -> None:
    schema = schema_module()
    int16 = schema.TensorType.INT16
    readers = _readers(subgraph)
    operators = []
    for op in subgraph.operators:
        operators.append(op)
        if code_of(model_t, op) != schema.BuiltinOperator.SUM:
            continue
        source, target = subgraph.tensors[op.inputs[0]], subgraph.tensors[op.outputs[0]]
        axis_data = model_t.buffers[subgraph.tensors[op.inputs[1]].buffer].data
        name = as_text(target.name or "")  # a model output's: "<name>_int16"
        bound = ranges.get(name) or ranges.get(name.removesuffix("_int16"))
        if (source.type != int16 or target.type != int16 or axis_data is None or not bound
                or source.shape is None or np.any(np.asarray(source.shape) < 1)):
            continue
        rank = len(source.shape)
        axes = {int(a) % rank for a in
                np.frombuffer(np.asarray(axis_data, np.uint8).tobytes(), np.int32)}
        signature = (source.shape if source.shapeSignature is None
                     or len(source.shapeSignature) != rank else source.shapeSignature)
        if any(int(signature[a]) < 1 for a in axes):  # a dynamic axis: no count to rescale by
            continue
        count = int(np.prod([int(source.shape[a]) for a in axes]))
        _rescaled(model_t, subgraph, int(op.outputs[0]), bound / 32767, readers)
        mean = _activation(subgraph, target, int16)
        subgraph.tensors[mean].quantization = schema.QuantizationParametersT()
        subgraph.tensors[mean].quantization.scale = [bound / 32767 / count]
        subgraph.tensors[mean].quantization.zeroPoint = [0]
        times = schema.QuantizationParametersT()
        times.scale, times.zeroPoint = [count / 32767], [0]
        factor = add_tensor(model_t, subgraph, np.array(32767, np.int16), int16, None, times)
        operators.append(new_operator(model_t, schema.BuiltinOperator.MUL, [mean, factor],
                             [int(op.outputs[0])]))
        operators[-1].builtinOptionsType = schema.BuiltinOptions.MulOptions
        operators[-1].builtinOptions = schema.MulOptionsT()
        op.opcodeIndex = opcode_index(model_t, schema.BuiltinOperator.MEAN)  # ReducerOptions
        op.outputs = np.array([mean], np.int32)
    subgraph.operators = operators


def _selects_in_one_scale(model_t, subgraph) -> None:
    schema = schema_module()
    selects = {schema.BuiltinOperator.SELECT_V2, schema.BuiltinOperator.SELECT}
    integers = (schema.TensorType.INT8, schema.TensorType.INT16)
    operators = []
    for op in subgraph.operators:
        output = subgraph.tensors[op.outputs[0]] if len(op.outputs) else None
        if (code_of(model_t, op) in selects and output.type in integers
                and output.quantization is not None and output.quantization.scale is not None):
            inputs = [int(i) for i in op.inputs]
            for position in (1, 2):
                source = subgraph.tensors[inputs[position]]
                if (source.quantization.scale[0] != output.quantization.scale[0]
                        or source.quantization.zeroPoint[0] != output.quantization.zeroPoint[0]):
                    again = _activation(subgraph, source, output.type)
                    subgraph.tensors[again].quantization = copy.deepcopy(output.quantization)
                    operators.append(new_operator(model_t, schema.BuiltinOperator.QUANTIZE,
                                         [inputs[position]], [again]))
                    inputs[position] = again
            op.inputs = np.array(inputs, np.int32)
        operators.append(op)
    subgraph.operators = operators


def _int16_squared_differences(model_t, subgraph) -> None:
    schema = schema_module()
    operators = []
    for op in subgraph.operators:
        output = subgraph.tensors[op.outputs[0]] if len(op.outputs) else None
        if (code_of(model_t, op) != schema.BuiltinOperator.SQUARED_DIFFERENCE
                or output.type != schema.TensorType.INT16):
            operators.append(op)
            continue
        difference = _activation(subgraph, output, schema.TensorType.INT16)
        quantization = schema.QuantizationParametersT()
        bound = float(output.quantization.scale[0]) * 32767
        quantization.scale, quantization.zeroPoint = [np.sqrt(bound) / 32767], [0]
        subgraph.tensors[difference].quantization = quantization
        operators.append(new_operator(model_t, schema.BuiltinOperator.SUB, list(op.inputs), [difference]))
        operators[-1].builtinOptionsType = schema.BuiltinOptions.SubOptions
        operators[-1].builtinOptions = schema.SubOptionsT()
        op.opcodeIndex = opcode_index(model_t, schema.BuiltinOperator.MUL)
        op.inputs = np.array([difference, difference], np.int32)
        op.builtinOptionsType = schema.BuiltinOptions.MulOptions
        op.builtinOptions = schema.MulOptionsT()
        operators.append(op)
    subgraph.operators = operators


def _zeros_scaled(model_t, subgraph) -> None:
    integers = (schema_module().TensorType.INT8, schema_module().TensorType.INT16)
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
    passing = {getattr(schema_module().BuiltinOperator, name) for name in _PASSING_ON}
    for reader in readers.get(index, []):
        if code_of(model_t, reader) not in passing:
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
    quantize = schema_module().BuiltinOperator.QUANTIZE
    return (not {int(o) for o in op.outputs} & {int(i) for i in subgraph.outputs}
            and all(code_of(model_t, reader) == quantize
                    for o in op.outputs for reader in readers.get(int(o), [])))


def _dequantized(model_t, subgraph, index: int, producer) -> int | None:
    """The integer tensor whose DEQUANTIZE is float tensor ``index`` (else None)."""
    source_op = producer.get(index)
    if (subgraph.tensors[index].type != schema_module().TensorType.FLOAT32 or source_op is None
            or code_of(model_t, source_op) != schema_module().BuiltinOperator.DEQUANTIZE):
        return None
    return int(source_op.inputs[0])


def _integer_moves(model_t, subgraph) -> bool:
    schema = schema_module()
    codes = {getattr(schema.BuiltinOperator, name): index for name, index in _MOVES.items()}
    producer = {int(o): op for op in subgraph.operators for o in op.outputs}
    readers = _readers(subgraph)
    edges = {int(i) for i in subgraph.outputs}
    changed, operators = False, []
    for op in subgraph.operators:
        operators.append(op)
        code = code_of(model_t, op)
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
                        if code_of(model_t, r) != schema.BuiltinOperator.QUANTIZE]
            if floating:  # they read it in float, through a DEQUANTIZE of their own
                again = _activation(subgraph, output, schema.TensorType.FLOAT32)
                operators.append(new_operator(model_t, schema.BuiltinOperator.DEQUANTIZE, [o], [again]))
                for reader in floating:
                    reader.inputs = np.array([again if int(i) == o else int(i)
                                              for i in reader.inputs], np.int32)
        changed = True
    subgraph.operators = operators
    return changed


def _integer_arithmetic(model_t, subgraph) -> bool:
    schema = schema_module()
    codes = {getattr(schema.BuiltinOperator, name) for name in _ARITHMETIC}
    producer = {int(o): op for op in subgraph.operators for o in op.outputs}
    readers = _readers(subgraph)
    edges = {int(i) for i in subgraph.outputs}
    taken, changed = set(), False
    for op in subgraph.operators:
        code = code_of(model_t, op)
        if code not in codes or len(op.outputs) != 1:
            continue
        sources = [_dequantized(model_t, subgraph, int(i), producer) for i in op.inputs]
        after = readers.get(int(op.outputs[0]), [])
        if (None in sources or int(op.outputs[0]) in edges or len(after) != 1
                or code_of(model_t, after[0]) != schema.BuiltinOperator.QUANTIZE):
            continue
        target = int(after[0].outputs[0])
        kind = subgraph.tensors[target].type
        if any(subgraph.tensors[i].type != kind for i in sources):
            continue
        if code == schema.BuiltinOperator.NEG:
            bound = {schema.TensorType.INT8: 127, schema.TensorType.INT16: 32767}[kind]
            quantization = schema.QuantizationParametersT()
            quantization.scale, quantization.zeroPoint = [1.0 / bound], [0]
            minus_one = add_tensor(model_t, subgraph,
                                    np.array(-bound, np.int8 if bound == 127 else np.int16),
                                    kind, "minus_one", quantization)
            sources.append(minus_one)
            op.opcodeIndex = opcode_index(model_t, schema.BuiltinOperator.MUL)
            op.builtinOptionsType = schema.BuiltinOptions.MulOptions
            op.builtinOptions = schema.MulOptionsT()
        elif code == schema.BuiltinOperator.SQUARE:  # no integer kernel: x * x
            sources.append(sources[0])
            op.opcodeIndex = opcode_index(model_t, schema.BuiltinOperator.MUL)
            op.builtinOptionsType = schema.BuiltinOptions.MulOptions
            op.builtinOptions = schema.MulOptionsT()
        op.inputs = np.array(sources, np.int32)
        op.outputs = np.array([target], np.int32)
        taken.add(id(after[0]))
        changed = True
    subgraph.operators = [op for op in subgraph.operators if id(op) not in taken]
    return changed


def _integer_concatenations(model_t, subgraph) -> bool:
    schema = schema_module()
    producer = {int(o): op for op in subgraph.operators for o in op.outputs}
    readers = _readers(subgraph)
    edges = {int(i) for i in subgraph.outputs}
    taken, changed, operators = set(), False, []
    for op in subgraph.operators:
        if code_of(model_t, op) != schema.BuiltinOperator.CONCATENATION:
            operators.append(op)
            continue
        sources = [_dequantized(model_t, subgraph, int(i), producer) for i in op.inputs]
        out = int(op.outputs[0])
        after = readers.get(out, [])
        if (None in sources or len(after) != 1
                or code_of(model_t, after[0]) != schema.BuiltinOperator.QUANTIZE):
            operators.append(op)
            continue
        target = int(after[0].outputs[0])
        quantization = subgraph.tensors[target].quantization
        if any(subgraph.tensors[i].type != subgraph.tensors[target].type for i in sources):
            operators.append(op)
            continue
        inputs = []
        for source in sources:
            if not _same_quantization(subgraph.tensors[source].quantization, quantization):
                requantized = _activation(subgraph, subgraph.tensors[source],
                                          subgraph.tensors[target].type)
                subgraph.tensors[requantized].quantization = copy.deepcopy(quantization)
                operators.append(new_operator(model_t, schema.BuiltinOperator.QUANTIZE, [source],
                                     [requantized]))
                source = requantized
            inputs.append(source)
        op.inputs = np.array(inputs, np.int32)
        op.outputs = np.array([target], np.int32)
        operators.append(op)
        if out in edges:  # the model's output too: in float, as before
            operators.append(new_operator(model_t, schema.BuiltinOperator.DEQUANTIZE, [target], [out]))
        taken.add(id(after[0]))
        changed = True
    subgraph.operators = [op for op in operators if id(op) not in taken]
    return changed


def _integer_selects(model_t, subgraph) -> bool:
    schema = schema_module()
    selects = {schema.BuiltinOperator.SELECT_V2, schema.BuiltinOperator.SELECT}
    quantize = schema.BuiltinOperator.QUANTIZE
    producer = {int(o): op for op in subgraph.operators for o in op.outputs}
    readers = _readers(subgraph)
    edges = {int(i) for i in subgraph.outputs}
    before, taken, changed = {}, set(), False  # ops to insert before an op; to drop
    for op in subgraph.operators:
        output = int(op.outputs[0])
        if (code_of(model_t, op) not in selects or output in edges
                or subgraph.tensors[output].type != schema.TensorType.FLOAT32):
            continue
        sources = [_dequantized(model_t, subgraph, int(i), producer) for i in op.inputs[1:]]
        known = [subgraph.tensors[i].type for i in sources if i is not None]
        after = readers.get(output, [])
        if len(after) == 1 and code_of(model_t, after[0]) == quantize:
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
        if kind not in _INTEGER_TYPES or any(k != kind for k in known):
            continue
        scale = float(quantization.scale[0])
        inputs, requantizes = [int(op.inputs[0])], []
        for index, source in zip((int(i) for i in op.inputs[1:]), sources):
            data = model_t.buffers[subgraph.tensors[index].buffer].data
            if source is not None:
                if float(subgraph.tensors[source].quantization.scale[0]) != scale:
                    again = _activation(subgraph, subgraph.tensors[source], kind)
                    subgraph.tensors[again].quantization = copy.deepcopy(quantization)
                    requantizes.append(new_operator(model_t, quantize, [source], [again]))
                    source = again
                inputs.append(source)
            elif data is not None and len(data) and index not in producer:
                value = np.frombuffer(np.asarray(data, np.uint8).tobytes(), np.float32)
                inputs.append(_quantized_constant(
                    model_t, subgraph, value.reshape(subgraph.tensors[index].shape), kind,
                    quantization))
            else:
                break
        else:
            op.inputs = np.array(inputs, np.int32)
            before.setdefault(id(op), []).extend(requantizes)
            changed = True
            if len(after) == 1 and code_of(model_t, after[0]) == quantize:
                op.outputs = np.array([int(after[0].outputs[0])], np.int32)  # its QUANTIZE's
                taken.add(id(after[0]))
                continue
            tensor = subgraph.tensors[output]
            tensor.type, tensor.quantization = kind, quantization
            for reader in after:  # a QUANTIZE now requantizes; a float op reads a DEQUANTIZE
                if code_of(model_t, reader) == quantize:
                    continue
                again = _activation(subgraph, tensor, schema.TensorType.FLOAT32)
                before.setdefault(id(reader), []).append(
                    new_operator(model_t, schema.BuiltinOperator.DEQUANTIZE, [output], [again]))
                reader.inputs = np.array([again if int(i) == output else int(i)
                                          for i in reader.inputs], np.int32)
    subgraph.operators = [new for op in subgraph.operators if id(op) not in taken
                          for new in [*before.get(id(op), []), op]]
    return changed


_COMPARISONS = ("LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL")


def _integer_comparisons(model_t, subgraph) -> bool:
    schema = schema_module()
    codes = {getattr(schema.BuiltinOperator, name) for name in _COMPARISONS}
    producer = {int(o): op for op in subgraph.operators for o in op.outputs}
    changed = False
    for op in subgraph.operators:
        if code_of(model_t, op) not in codes or len(op.inputs) != 2:
            continue
        inputs = [int(i) for i in op.inputs]
        sources = [_dequantized(model_t, subgraph, i, producer) for i in inputs]
        if sorted(s is None for s in sources) != [False, True]:
            continue
        known = next(s for s in sources if s is not None)
        other = inputs[sources.index(None)]
        data = model_t.buffers[subgraph.tensors[other].buffer].data
        kind = subgraph.tensors[known].type
        if (kind not in _INTEGER_TYPES or data is None or not len(data) or other in producer
                or subgraph.tensors[other].type != schema.TensorType.FLOAT32):
            continue
        value = np.frombuffer(np.asarray(data, np.uint8).tobytes(), np.float32)
        shape = subgraph.tensors[other].shape
        constant = _quantized_constant(model_t, subgraph,
                                       value.reshape(() if shape is None else shape), kind,
                                       subgraph.tensors[known].quantization)
        op.inputs = np.array([known if s is not None else constant for s in sources], np.int32)
        changed = True
    return changed


def _quantized_constant(model_t, subgraph, value: np.ndarray, kind: int, quantization) -> int:
    """A new constant: float ``value`` quantized (one scale) as integer type ``kind``."""
    dtype = _INTEGER_TYPES[kind]
    bounds = np.iinfo(dtype)
    scale, zero = float(quantization.scale[0]), int(quantization.zeroPoint[0])
    quantized = np.clip(np.round(value / scale) + zero, bounds.min, bounds.max).astype(dtype)
    return add_tensor(model_t, subgraph, quantized, kind, None, copy.deepcopy(quantization))


def _activation(subgraph, like, tensor_type: int) -> int:
    """A new data-less tensor of ``like``'s shape."""
    return add_activation(subgraph, tensor_type, like.shape, like.shapeSignature)


def _integer_bool_casts(model_t, subgraph) -> None:
    schema = schema_module()
    readers = _readers(subgraph)
    operators = []
    for op in subgraph.operators:
        if (code_of(model_t, op) != schema.BuiltinOperator.CAST
                or subgraph.tensors[op.inputs[0]].type != schema.TensorType.BOOL
                or subgraph.tensors[op.outputs[0]].type != schema.TensorType.FLOAT32
                or not _read_by_quantizes_only(model_t, subgraph, op, readers)
                or any(subgraph.tensors[q.outputs[0]].type not in _INTEGER_TYPES
                       for q in readers.get(int(op.outputs[0]), []))):
            operators.append(op)
            continue
        for quantize in readers.get(int(op.outputs[0]), []):
            output = subgraph.tensors[quantize.outputs[0]]
            one, nought = (_quantized_constant(model_t, subgraph, np.array(v, np.float32),
                                               output.type, output.quantization)
                           for v in (1.0, 0.0))
            quantize.opcodeIndex = opcode_index(model_t, schema.BuiltinOperator.SELECT_V2)
            quantize.inputs = np.array([op.inputs[0], one, nought], np.int32)
            quantize.builtinOptionsType = schema.BuiltinOptions.SelectV2Options
            quantize.builtinOptions = schema.SelectV2OptionsT()
    subgraph.operators = operators


# --- loops: what TensorFlow's quantizer leaves in float around a WHILE ---


def integer_loop_carries(flatbuffer: bytes) -> bytes:
    """A ``WHILE`` loop's carried values made integer.

    TensorFlow's int8 quantizer keeps every value a ``WHILE`` carries in
    float: the body quantizes each at its start and dequantizes it at its
    end, and leaves a ``DYNAMIC_UPDATE_SLICE`` (the write of a step's output
    into the sequence the loop carries) in float. Here:

    - a ``DYNAMIC_UPDATE_SLICE`` whose update is dequantized writes the
      integer update (the slice is copied, not computed) into an integer
      sequence of the update's scale;
    - each float value the loop carries takes the scale of what the body
      makes of it (the integer tensor its last ``DEQUANTIZE`` reads, the
      update's scale of a written sequence, or, for a value the body only
      reads, the scale its first ``QUANTIZE`` gives it): the loop carries
      the integer tensor, the body's ``QUANTIZE`` of it requantizes (or goes
      where the scales agree), and the main graph quantizes it before the
      loop (a constant, such as a zero state, in the file) and dequantizes
      it after, for a float reader.

    A value whose scale cannot be told this way stays float.
    """
    schema = schema_module()
    model_t = load_model(flatbuffer)
    main = model_t.subgraphs[0]
    operators = []
    for op in main.operators:
        if code_of(model_t, op) != schema.BuiltinOperator.WHILE:
            operators.append(op)
            continue
        cond = model_t.subgraphs[op.builtinOptions.condSubgraphIndex]
        body = model_t.subgraphs[op.builtinOptions.bodySubgraphIndex]
        _integer_updates(model_t, body)
        before, after = [], []
        for position in range(len(op.inputs)):
            carried = _carry(model_t, body, position)
            if carried is None:
                continue
            kind, quantization = carried.type, carried.quantization
            _integer_carry_in_body(model_t, body, position, kind, quantization)
            _integer_carry_in_cond(model_t, cond, position, kind, quantization)
            before += _quantized_before(model_t, main, op, position, kind, quantization)
            after += _dequantized_after(model_t, main, op, position, kind, quantization)
        body.operators = without_unread_dequantizes(model_t, body)
        operators += [*before, op, *after]
    main.operators = operators
    _requantizes_folded(model_t, main)
    main.operators = without_unread_dequantizes(model_t, main)
    drop_unused(model_t)
    return pack_model(model_t)


def _same_quantization(a, b) -> bool:
    return (a is not None and b is not None and a.scale is not None and b.scale is not None
            and list(np.asarray(a.scale, np.float64)) == list(np.asarray(b.scale, np.float64))
            and list(np.asarray(a.zeroPoint)) == list(np.asarray(b.zeroPoint)))


def _integer_updates(model_t, body) -> None:
    """Each ``DYNAMIC_UPDATE_SLICE`` of a dequantized update into a float
    sequence the loop carries: integer, in the update's scale."""
    schema = schema_module()
    producer = {int(o): op for op in body.operators for o in op.outputs}
    readers = _readers(body)
    inputs = [int(i) for i in body.inputs]
    operators = []
    for op in body.operators:
        operators.append(op)
        if code_of(model_t, op) != schema.BuiltinOperator.DYNAMIC_UPDATE_SLICE:
            continue
        operand, update = int(op.inputs[0]), int(op.inputs[1])
        source = _dequantized(model_t, body, update, producer)
        if source is None or operand not in inputs:
            continue
        out = int(op.outputs[0])
        op.inputs = np.array([operand, source, int(op.inputs[2])], np.int32)
        body.tensors[out].type = body.tensors[source].type
        body.tensors[out].quantization = copy.deepcopy(body.tensors[source].quantization)
        # The operand becomes integer with the loop's carry; a float reader
        # of the result (none but the body's output, as traced) reads a DEQUANTIZE.
        floating = readers.get(out, [])
        if floating:
            float_out = _activation(body, body.tensors[out], schema.TensorType.FLOAT32)
            operators.append(new_operator(model_t, schema.BuiltinOperator.DEQUANTIZE, [out], [float_out]))
            for reader in floating:
                reader.inputs = np.array([float_out if int(i) == out else int(i)
                                          for i in reader.inputs], np.int32)
    body.operators = operators


def _carry(model_t, body, position: int):
    """The integer tensor whose type and quantization the loop carries
    value ``position`` in, or None (it stays float)."""
    schema = schema_module()
    into, out = int(body.inputs[position]), int(body.outputs[position])
    if body.tensors[into].type != schema.TensorType.FLOAT32:
        return None
    if body.tensors[out].type in _INTEGER_TYPES:
        return body.tensors[out]
    if out == into:  # carried unchanged: read through a QUANTIZE
        for reader in _readers(body).get(into, []):
            if code_of(model_t, reader) == schema.BuiltinOperator.QUANTIZE:
                return body.tensors[int(reader.outputs[0])]
        return None
    producer = {int(o): op for op in body.operators for o in op.outputs}
    source = _dequantized(model_t, body, out, producer)
    return None if source is None else body.tensors[source]


def _integer_carry_in_body(model_t, body, position: int, kind: int, quantization) -> None:
    schema = schema_module()
    into, out = int(body.inputs[position]), int(body.outputs[position])
    producer = {int(o): op for op in body.operators for o in op.outputs}
    if out != into and body.tensors[out].type == schema.TensorType.FLOAT32:
        outputs = np.array(body.outputs, np.int32)
        outputs[position] = _dequantized(model_t, body, out, producer)
        body.outputs = outputs
    float_into = _activation(body, body.tensors[into], schema.TensorType.FLOAT32)
    body.tensors[into].type = kind
    body.tensors[into].quantization = copy.deepcopy(quantization)
    kept, floating = [], False
    replaced = {}
    for op in body.operators:
        reads = into in {int(i) for i in op.inputs}
        code = code_of(model_t, op)
        if reads and code == schema.BuiltinOperator.QUANTIZE and _same_quantization(
                body.tensors[int(op.outputs[0])].quantization, quantization):
            replaced[int(op.outputs[0])] = into  # the QUANTIZE goes
            continue
        if reads and code not in (schema.BuiltinOperator.QUANTIZE,
                                  schema.BuiltinOperator.DYNAMIC_UPDATE_SLICE):
            op.inputs = np.array([float_into if int(i) == into else int(i) for i in op.inputs],
                                 np.int32)
            floating = True
        kept.append(op)
    for op in kept:
        op.inputs = np.array([replaced.get(int(i), int(i)) for i in op.inputs], np.int32)
    body.outputs = np.array([replaced.get(int(i), int(i)) for i in body.outputs], np.int32)
    if floating:
        kept.insert(0, new_operator(model_t, schema.BuiltinOperator.DEQUANTIZE, [into], [float_into]))
    body.operators = kept


def _integer_carry_in_cond(model_t, cond, position: int, kind: int, quantization) -> None:
    schema = schema_module()
    into = int(cond.inputs[position])
    if any(into in {int(i) for i in op.inputs} for op in cond.operators):
        float_into = _activation(cond, cond.tensors[into], schema.TensorType.FLOAT32)
        for op in cond.operators:
            op.inputs = np.array([float_into if int(i) == into else int(i) for i in op.inputs],
                                 np.int32)
        cond.operators.insert(0, new_operator(model_t, schema.BuiltinOperator.DEQUANTIZE, [into],
                                     [float_into]))
    cond.tensors[into].type = kind
    cond.tensors[into].quantization = copy.deepcopy(quantization)


def _quantized_before(model_t, main, op, position: int, kind: int, quantization) -> list:
    schema = schema_module()
    value = int(op.inputs[position])
    op.inputs = np.array(op.inputs, np.int32)
    data = model_t.buffers[main.tensors[value].buffer].data
    if data is not None and len(data):  # a constant (a zero state): quantized in the file
        constant = np.frombuffer(bytes(data), np.float32).reshape(main.tensors[value].shape)
        op.inputs[position] = _quantized_constant(model_t, main, constant, kind, quantization)
        return []
    integer = _activation(main, main.tensors[value], kind)
    main.tensors[integer].quantization = copy.deepcopy(quantization)
    op.inputs[position] = integer
    return [new_operator(model_t, schema.BuiltinOperator.QUANTIZE, [value], [integer])]


def _dequantized_after(model_t, main, op, position: int, kind: int, quantization) -> list:
    schema = schema_module()
    value = int(op.outputs[position])
    integer = _activation(main, main.tensors[value], kind)
    main.tensors[integer].quantization = copy.deepcopy(quantization)
    op.outputs = np.array(op.outputs, np.int32)
    op.outputs[position] = integer
    return [new_operator(model_t, schema.BuiltinOperator.DEQUANTIZE, [integer], [value])]


def _requantizes_folded(model_t, subgraph) -> None:
    """A ``QUANTIZE`` of a ``DEQUANTIZE``: reads the integer tensor (and goes
    where the two scales agree)."""
    schema = schema_module()
    producer = {int(o): op for op in subgraph.operators for o in op.outputs}
    replaced, kept = {}, []
    for op in subgraph.operators:
        if code_of(model_t, op) == schema.BuiltinOperator.QUANTIZE:
            source = _dequantized(model_t, subgraph, int(op.inputs[0]), producer)
            out = int(op.outputs[0])
            if source is not None:
                if (_same_quantization(subgraph.tensors[source].quantization,
                                       subgraph.tensors[out].quantization)
                        and subgraph.tensors[source].type == subgraph.tensors[out].type
                        and out not in {int(o) for o in subgraph.outputs}):
                    replaced[out] = source
                    continue
                op.inputs = np.array([source], np.int32)
        kept.append(op)
    for op in kept:
        op.inputs = np.array([replaced.get(int(i), int(i)) for i in op.inputs], np.int32)
    subgraph.operators = kept
