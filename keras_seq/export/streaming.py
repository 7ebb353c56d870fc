"""Streaming: a recurrent model that runs chunk by chunk with its states explicit.

`streaming_model` rebuilds a functional model with the same layers and
weights, every recurrent layer taking its states as inputs and returning the
new ones, so that a device can feed a stream a few steps at a time and carry
the states between calls (the external-state pattern of on-device keyword
spotting); `initial_streaming_states` gives the states of the first chunk.
"""

from __future__ import annotations

import keras
import numpy as np

from keras_seq._backend import EXPORT_THERE, require_tensorflow
from keras_seq._validation import ArgumentTypeError, ArgumentValueError
from keras_seq.layers import (
    GRU,
    BahdanauAttention,
    ConvertibleLSTM,
    ConvertibleSimpleRNN,
    DynamicKMaxPooling,
    KMaxPooling,
    MultiHeadAttention,
    RecurrentCell,
    RecurrentDecoder,
    SinusoidalPositionalEncoding,
    TransformerDecoder,
    TransformerEncoder,
    WideConvolution1D,
)
from keras_seq.layers.recurrent.rnn import output_is_first_state, reads_memory

__all__ = ["initial_streaming_states", "streaming_calibration", "streaming_model"]

# Layers whose output at a step depends on other steps of the sequence.
_WHOLE_SEQUENCE = (
    keras.layers.Bidirectional,
    keras.layers.Attention,
    keras.layers.AdditiveAttention,
    keras.layers.MultiHeadAttention,
    MultiHeadAttention,
    BahdanauAttention,
    TransformerEncoder,
    TransformerDecoder,
    RecurrentDecoder,
    SinusoidalPositionalEncoding,
    KMaxPooling,
    DynamicKMaxPooling,
    WideConvolution1D,
    keras.layers.GlobalAveragePooling1D,
    keras.layers.GlobalMaxPooling1D,
    keras.layers.MaxPooling1D,
    keras.layers.AveragePooling1D,
    keras.layers.Conv1D,
    keras.layers.Flatten,
)

# Keras' own layer -> the package's form with the same weights, whose
# inference loop converts to TFLite builtin ops.
_CONVERTIBLE = {
    keras.layers.LSTM: ConvertibleLSTM,
    keras.layers.SimpleRNN: ConvertibleSimpleRNN,
    keras.layers.GRU: GRU,
}


def streaming_model(model: keras.Model) -> keras.Model:
    """The model with every recurrent layer's states as inputs and outputs.

    The same layers and weights. Inputs: the model's inputs, then each
    recurrent layer's states in layer order and in its cell's state order,
    named ``"{layer.name}_state_{i}"``; outputs: the model's outputs, then the
    new states in the same order. Fed a sequence chunk by chunk (any chunk
    lengths, 1 included), each chunk with the states the previous one
    returned (`initial_streaming_states` for the first), it gives the outputs
    of the whole sequence: per step for ``return_sequences=True`` layers, and
    for ``return_sequences=False`` the last valid step so far (the NTM,
    whose output is not its state: the last step of the chunk). Keras'
    ``LSTM``, ``GRU`` and ``SimpleRNN`` become `keras_seq.layers`'
    ``ConvertibleLSTM``, ``GRU`` and ``ConvertibleSimpleRNN`` (the same
    weights), whose loops convert to TFLite builtin ops; a ``stateful`` layer
    becomes stateless (its states are the inputs).

    Args:
        model: a functional or `keras.Sequential` model whose other layers act
            step by step (Embedding, Dense, Dropout, normalisation, Highway,
            PositionwiseFeedForward, ...).

    Returns:
        A functional `keras.Model`.

    Raises:
        ValueError: naming the layer: a layer that needs the whole sequence
            (``Bidirectional``, a ``go_backwards`` recurrent layer, attention,
            pooling or convolution over time, positional encoding), a nested
            model holding a recurrent layer, or a model without recurrent layer.
        TypeError: ``model`` is not a built functional or Sequential model.

    Examples:
        >>> import keras, numpy as np
        >>> from keras_seq import layers
        >>> from keras_seq.export import initial_streaming_states, streaming_model
        >>> x = keras.Input((None, 3))
        >>> model = keras.Model(x, layers.GRU(4, return_sequences=True, name="gru")(x))
        >>> stream = streaming_model(model)
        >>> [t.name for t in stream.inputs][1:]
        ['gru_state_0']
        >>> seq = np.random.default_rng(0).normal(size=(2, 5, 3)).astype("float32")
        >>> y1, state = stream([seq[:, :2], *initial_streaming_states(stream, 2)])
        >>> y2, state = stream([seq[:, 2:], state])  # the returned state as it is
        >>> bool(np.allclose(np.concatenate([y1, y2], 1), model(seq), atol=1e-5))
        True
    """
    require_tensorflow("keras_seq.export.streaming_model", EXPORT_THERE)
    where = "streaming_model"
    graph = _functional(where, model)
    recurrent = _check_layers(where, graph)
    if not recurrent:
        raise ArgumentValueError(where, f'model {model.name!r} has no recurrent layer; it has no state to stream.')
    copies = {id(layer): _stateless_copy(layer) for layer in recurrent}
    returns_state = {id(copies[id(layer)]): layer.return_state for layer in recurrent}
    inputs = [
        keras.Input(batch_shape=(None, *x.shape[1:]), dtype=x.dtype,
                    name=x._keras_history.operation.name)
        for x in graph.inputs
    ]
    state_inputs, new_states = [], []

    def operation_fn(operation):
        copy = copies.get(id(operation))
        if copy is None:
            return operation

        def call(*args, **kwargs):
            if kwargs.get("initial_state") is not None or len(args) > 1:
                raise ArgumentValueError(where, f"layer {copy.name!r} is called with initial states from the model; a streaming model's states are its inputs.")
            # The layer's states: fresh inputs, in the cell's state order.
            sizes = _state_sizes(copy)
            states = [
                keras.Input(batch_shape=(None, size), dtype=copy.compute_dtype,
                            name=f"{copy.name}_state_{i}")
                for i, size in enumerate(sizes)
            ]
            state_inputs.extend(states)
            kwargs = dict(kwargs)
            kwargs["initial_state"] = states
            result = copy(*args, **kwargs)
            # The output (and a cell's alignment history), then the states.
            result, layer_states = result[:-len(sizes)], result[-len(sizes):]
            new_states.extend(layer_states)
            output = result[0]
            # Keras' own cells output h; a RecurrentCell says (its loop hints,
            # or a linear cell's derived step).
            first_state_out = (not isinstance(copy.cell, RecurrentCell)
                               or output_is_first_state(copy.cell))
            if not copy.return_sequences and first_state_out:
                # The last valid step's output, also after a chunk that is all
                # padding (whose own last output would be zeros).
                output = layer_states[0]
            result = [output, *result[1:]]
            if returns_state[id(copy)]:
                return [*result, *layer_states]
            return result if len(result) > 1 else output

        return call

    outputs = graph._run_through_graph(inputs, operation_fn=operation_fn)
    flat_outputs = keras.tree.flatten(outputs)
    return _StreamingModel(
        [*inputs, *state_inputs], [*flat_outputs, *new_states], name=f"{model.name}_streaming"
    )


class _StreamingModel(keras.Model):
    """The functional model `streaming_model` returns: before running, it
    checks that it is fed one tensor per input and states of the widths its
    recurrent layers carry (Keras alone would fail deep inside a cell, or
    broadcast a state of width 1), and it takes any mix of arrays and tensors,
    so that the states one call returns feed the next as they are (Keras
    refuses a list that mixes the two)."""

    def __call__(self, inputs, *args, **kwargs):
        self._check_inputs(inputs)
        return super().__call__(self._as_tensors(inputs), *args, **kwargs)

    def _as_tensors(self, inputs):
        """A list or tuple of inputs with every array a tensor of its input's
        dtype; symbolic inputs (a functional model built on this one) as they are."""
        if not isinstance(inputs, (list, tuple)) or any(
            isinstance(value, keras.KerasTensor) for value in inputs
        ):
            return inputs
        return [
            value if keras.ops.is_tensor(value) else keras.ops.convert_to_tensor(value, spec.dtype)
            for value, spec in zip(inputs, self.inputs)
        ]

    def _check_inputs(self, inputs):
        flat = keras.tree.flatten(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        names = [t.name for t in self.inputs]
        if len(flat) != len(names):
            raise ArgumentValueError(
                f"streaming model {self.name!r}", f"expected {len(names)} inputs in this order, "
                f"{', '.join(names)} (the model's inputs, then each recurrent layer's states); "
                f"received {len(flat)}."
            )
        for value, spec in zip(flat, self.inputs):
            layer_name, marker, index = spec.name.rpartition("_state_")
            if not marker or not index.isdigit():
                continue
            shape = tuple(getattr(value, "shape", np.shape(value)))
            expected = tuple(spec.shape)
            if len(shape) != len(expected) or any(
                e is not None and s is not None and s != e for s, e in zip(shape, expected)
            ):
                raise ArgumentValueError(
                    f"streaming model {self.name!r}", f"state {index} of layer {layer_name!r} "
                    f"(input {spec.name!r}) must have shape (batch, {expected[1]}); received "
                    f"shape {shape}."
                )


def initial_streaming_states(stream: keras.Model, batch_size: int,
                             memory=None) -> list[np.ndarray]:
    """The states to feed a `streaming_model` with its first chunk.

    Zeros for the LSTMs and GRUs; the NTM's start (its learned read vector,
    its first weightings and constant memory); for a cell that reads a
    memory (`keras_seq.layers.AttentionWrapper`), its start over ``memory``
    ``(batch_size, S, d)``, the memory the stream is fed. One array per
    state input, in the streaming model's input order.
    """
    from keras_seq._validation import check_positive_int, invalid_value

    batch_size = check_positive_int("initial_streaming_states", "batch_size", batch_size)
    states = []
    # Each state input names its layer (``"{layer.name}_state_{i}"``, the
    # streaming model's contract), which may be a model loaded from a file.
    layers = {layer.name: layer for layer in stream.layers}
    for tensor in stream.inputs:
        layer_name, marker, index = tensor.name.rpartition("_state_")
        if not marker or not index.isdigit():
            continue
        layer = layers[layer_name]
        if reads_memory(layer.cell):
            if memory is None:
                raise invalid_value(
                    "initial_streaming_states", "memory",
                    f"the memory (batch, S, d) that layer {layer_name!r} reads", None)
            start = layer.cell.get_initial_state(batch_size=batch_size, memory=memory)
        else:
            start = layer.cell.get_initial_state(batch_size=batch_size)
        start = start if isinstance(start, (list, tuple)) else [start]
        states.append(np.asarray(start[int(index)]))
    return states


def streaming_calibration(stream: keras.Model, sequences, max_examples: int | None = None,
                          ) -> list[list[np.ndarray]]:
    """Calibration examples for an integer step model: one per step of ``sequences``.

    Runs ``stream`` (a `streaming_model`) one step at a time over each
    sequence from `initial_streaming_states`, and records what the step was
    fed: the step's inputs and the states it received, the states the
    device will feed it. For ``convert_to_tflite(stream,
    quantize="int8", representative_data=...)``: calibrating on zero states
    alone would clip every state a real stream reaches.

    Args:
        stream: a `streaming_model` of one sequence input (a memory-reading
            cell needs its memory: not supported here).
        sequences: ``(N, T, ...)`` inputs, or a list of ``(T, ...)`` ones.
        max_examples: stop after this many steps (`None`: every step).

    Returns:
        A list of examples, each a list of arrays of batch 1 in the streaming
        model's input order.
    """
    from keras_seq._validation import check_positive_int

    where = "streaming_calibration"
    if not isinstance(stream, _StreamingModel):
        raise ArgumentTypeError(where, "`stream` must be a model from streaming_model(); "
                                f"received {type(stream).__name__}.")
    max_examples = check_positive_int(where, "max_examples", max_examples, allow_none=True)
    states_in = sum(1 for t in stream.inputs if "_state_" in t.name)
    if len(stream.inputs) - states_in != 1:
        raise ArgumentValueError(where, f"`stream` takes {len(stream.inputs) - states_in} "
                                 "inputs besides its states; calibration here feeds one.")
    examples = []
    for sequence in sequences:
        sequence = np.asarray(sequence)
        states = initial_streaming_states(stream, 1)
        for t in range(sequence.shape[0]):
            step = sequence[None, t:t + 1]
            examples.append([step, *states])
            if max_examples is not None and len(examples) >= max_examples:
                return examples
            outputs = stream([step, *states])
            states = [np.asarray(s) for s in outputs[len(outputs) - states_in:]]
    return examples


def _functional(where, model):
    if isinstance(model, keras.Sequential):
        if not model.built:
            raise ArgumentTypeError(where, f'the Sequential model {model.name!r} is not built.')
        model = model._functional
    if not isinstance(model, keras.Model) or not hasattr(model, "_run_through_graph"):
        raise ArgumentTypeError(where, f'`model` must be a functional or Sequential keras.Model, received {type(model).__name__}.')
    return model


def _check_layers(where, graph) -> list:
    """The recurrent layers of ``graph`` in layer order, after refusing any
    layer that needs the whole sequence."""
    recurrent = []
    for layer in graph.layers:
        if isinstance(layer, _WHOLE_SEQUENCE):
            raise ArgumentValueError(where, f'layer {layer.name!r} ({type(layer).__name__}) needs the whole sequence; a streaming model runs one chunk at a time.')
        if isinstance(layer, keras.layers.RNN):
            if layer.go_backwards:
                raise ArgumentValueError(where, f'layer {layer.name!r} ({type(layer).__name__}) has go_backwards=True and so needs the whole sequence; a streaming model runs forwards, one chunk at a time.')
            recurrent.append(layer)
        elif isinstance(layer, keras.Model) and any(
            isinstance(inner, keras.layers.RNN) for inner in layer._flatten_layers()
        ):
            raise ArgumentValueError(where, f'layer {layer.name!r} is a nested model with a recurrent layer; call streaming_model on a model built from its layers.')
    return recurrent


def _stateless_copy(layer):
    """``layer`` with the same weights, returning its states, not stateful, in
    its convertible form."""
    config = dict(layer.get_config(), return_state=True, stateful=False)
    cls = _CONVERTIBLE.get(type(layer), type(layer))
    if type(layer) is keras.layers.GRU:
        config = {k: v for k, v in config.items() if k in _GRU_ARGUMENTS}
    copy = cls.from_config(config)
    if isinstance(copy, keras.layers.RNN) and reads_memory(copy.cell):
        memory = layer._inbound_nodes[0].arguments.kwargs["memory"]
        copy.build(_input_shape(layer), memory_shape=tuple(memory.shape))
    else:
        copy.build(_input_shape(layer))
    copy.set_weights(layer.get_weights())
    return copy


# The arguments that keras.layers.GRU and keras_seq.layers.GRU share.
_GRU_ARGUMENTS = (
    "name", "dtype", "trainable", "units", "activation", "recurrent_activation", "use_bias",
    "kernel_initializer", "recurrent_initializer", "bias_initializer", "kernel_regularizer",
    "recurrent_regularizer", "bias_regularizer", "kernel_constraint", "recurrent_constraint",
    "bias_constraint", "dropout", "recurrent_dropout", "seed", "return_sequences",
    "return_state", "stateful", "unroll", "reset_after", "go_backwards",
)


def _input_shape(layer):
    """The sequence input shape of ``layer``'s first call."""
    inputs = layer._inbound_nodes[0].input_tensors
    return tuple(inputs[0].shape)


def _state_sizes(layer) -> list[int]:
    size = layer.cell.state_size
    return list(size) if isinstance(size, (list, tuple)) else [size]
