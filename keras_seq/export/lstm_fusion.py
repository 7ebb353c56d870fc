"""TFLite's fused LSTM kernel for `PeepholeLSTM`, `CoupledGateLSTM` and `keras.layers.LSTM`.

TFLite has one builtin op for a whole LSTM layer, ``UNIDIRECTIONAL_SEQUENCE_LSTM``
(no WHILE loop), with peepholes and a coupled input-forget gate (CIFG). Its
converter creates it only from a function marked ``api_implements="lstm_<id>"``
in Keras 2's calling convention, and only as a plain LSTM with ``cell_clip=10``.
So `convert_fused_lstm`:

1. traces the model with `_FusedLSTM` as its lowering
   (`keras_seq.export._lowering`): each layer whose cell declares an LSTM
   operator form (`LSTMForm`: `PeepholeLSTM`, `CoupledGateLSTM`,
   ``keras.layers.LSTM``, their subclasses that keep their cell's step, a
   user's cell that declares one) calls that function instead of its loop:
   a plain LSTM, which CIFG layers call with a 4-gate kernel whose
   input-gate block is zero; peepholes have no argument. Every Keras
   variable is read as a constant;
2. converts it through a SavedModel, where the converter finds the functions
   (the frozen-graph route inlines them first) and puts a fused op in each;
3. edits the flatbuffer (`keras_seq.export._flatbuffer`): each fused op is
   matched to its layer by its weights, its cell clip is switched off, its
   peephole inputs are added (float32, or int8 with a symmetric scale when
   ``quantize="dynamic"`` made the weights int8) and, for CIFG, its
   input-gate inputs are removed (then the tensors nothing uses). The op keeps h and c in variable tensors, which the runtime
   zeroes only at ``allocate_tensors()`` or ``reset_all_variables()``, so a
   ``FILL`` op writes zeros into them right before the op: every ``invoke()``
   starts from a zero state, as the Keras layer does.

A layer that the kernel cannot express keeps its loop (WHILE, builtin ops),
with a `UserWarning` that names it and the reason: a mask (the op has no mask
input; this includes ``mask_zero`` embeddings and ``keras.layers.Masking``),
``return_state=True`` (the op does not output the final cell state), an
``initial_state``, ``stateful=True``, zoneout (at inference each state is
mixed with its previous one, which the kernel cannot do), activations other
than tanh/sigmoid, a compute dtype other than float32, or a dynamic batch.

References:
    TFLite kernel: ``tensorflow/lite/kernels/unidirectional_sequence_lstm.cc``
    (input order in ``lstm_shared.h``). Converter:
    ``tensorflow/compiler/mlir/lite/transforms/prepare_composite_functions_tf.cc``
    and ``ConvertKerasLSTMLayer`` in ``.../lite/utils/lstm_utils.cc``.
    Gers & Schmidhuber, "Recurrent nets that time and count", IJCNN 2000
    (peepholes); Greff et al., "LSTM: A Search Space Odyssey", 2017 (CIFG).
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf

from keras_seq._backend import EXPORT_THERE, require_tensorflow
from keras_seq._validation import (
    ArgumentValueError,
    check_positive_int,
)
from keras_seq.export._checks import check_quantize
from keras_seq.export._flatbuffer import (
    CELL_TO_GATE,
    GATE_BIAS,
    INPUT_TO_GATE,
    RECURRENT_TO_GATE,
    FusedLayer,
    builtin_op_count,
    edit_fused_ops,
)
from keras_seq.export._lowering import BuiltinLoops
from keras_seq.export._tflite_converter import convert_with_signature
from keras_seq.export._tracing import (
    flat_outputs,
    models_of,
    signature_specs,
    traceable,
)
from keras_seq.export.integer_tflite import (
    calibration_examples,
    check_fused_16x8,
    check_integer_arguments,
    quantize_flatbuffer,
    require_micro,
    static_specs,
)
from keras_seq.layers.recurrent.operator_forms import LSTMForm, operator_form

_GATES = "ifco"  # Keras' order of the blocks of kernel, recurrent_kernel and bias


def convert_fused_lstm(
    model,
    input_signature: Sequence[tf.TensorSpec] | None = None,
    quantize: str | None = None,
    batch_size: int | None = None,
    representative_data=None,
    integer_io: bool = False,
) -> bytes:
    """Converts a model to TFLite with its LSTM layers as fused ``UNIDIRECTIONAL_SEQUENCE_LSTM`` ops.

    Every `PeepholeLSTM`, `CoupledGateLSTM` (with or without peepholes) and
    `keras.layers.LSTM` (also inside `keras.layers.Bidirectional` and nested
    models) becomes one builtin op with its peephole weights and CIFG mode set,
    no cell clipping, and a zero state at the start of every ``invoke()``.
    ``go_backwards`` becomes a ``REVERSE_V2`` of the op's input (outputs in
    processing order, as in Keras); ``return_sequences=False`` a slice of the
    last step. The kernel needs a static batch; time stays dynamic.

    A layer the kernel cannot express keeps its loop and triggers a
    `UserWarning` naming it (see the module docstring): a masked layer is
    computed exactly, as a WHILE loop, rather than refused.

    Args:
        model: a `keras.Model`, or a callable when `input_signature` is given.
        input_signature: `tf.TensorSpec`s of the inputs; a dynamic batch
            dimension is set to `batch_size`. Default: the model's inputs with
            batch `batch_size` and a dynamic time axis.
        quantize: `None`, ``"dynamic"`` (int8 weights), ``"float16"``,
            ``"int8"`` or ``"int16x8"``, as in `convert_to_tflite`. With
            ``"int8"`` each fused op is TFLite's integer LSTM kernel (int8
            weights and activations, int16 peepholes and cell state, gate
            scales from calibration), still over any length; every other op
            an integer kernel too. With ``"int16x8"`` it is TensorFlow Lite
            for Microcontrollers' 16x8 LSTM kernel (int16 activations and
            cell state, int8 weights, int64 biases), which LiteRT lacks: a
            plain LSTM (peepholes and CIFG are refused) over static shapes
            (the length from the signature or the examples).
        batch_size: the static batch size. Default 1.
        representative_data: the calibration examples of ``"int8"`` and
            ``"int16x8"`` (see `convert_to_tflite`); in int8 their lengths
            may differ.
        integer_io: int8 inputs and outputs (see `convert_to_tflite`).

    Returns:
        The flatbuffer bytes (builtin ops only).

    Raises:
        ValueError: a bad argument, or a signature whose batch differs from
            `batch_size`; with an integer mode, a loop left beside the fused
            ops (TensorFlow's quantizer crashes on loops) or a quantizer
            failure; with ``"int16x8"``, peepholes or CIFG.
        ImportError: ``"int16x8"`` without ``tflite-micro`` installed.
        RuntimeError: the converter did not fuse a layer that was routed to
            the fused kernel (the edit would otherwise give wrong numbers).

    Examples:
        >>> import keras
        >>> from keras_seq import layers
        >>> from keras_seq.export import convert_to_tflite, tflite_op_names
        >>> inputs = keras.Input((None, 3))
        >>> model = keras.Model(inputs, layers.PeepholeLSTM(4)(inputs))
        >>> ops = tflite_op_names(convert_to_tflite(model, fuse_lstm=True))
        >>> "UNIDIRECTIONAL_SEQUENCE_LSTM" in ops, "WHILE" in ops
        (True, False)
    """
    require_tensorflow("keras_seq.export.convert_fused_lstm", EXPORT_THERE)
    where = "convert_fused_lstm"
    check_quantize(where, quantize)
    integer, integer_io = check_integer_arguments(where, quantize, representative_data,
                                                  integer_io)
    if batch_size is not None:
        check_positive_int(where, "batch_size", batch_size)
    call, specs, names = _traceable(where, model, input_signature, batch_size)
    if integer:
        examples = calibration_examples(where, representative_data, specs)
        if quantize == "int16x8":  # TFLite Micro's kernel: its package, static shapes
            require_micro(where)
            specs = static_specs(where, specs, examples)
    flatbuffer, layers = _convert_with_lstm_functions(
        model, call, specs, names, None if integer else quantize)
    flatbuffer = edit_fused_ops(flatbuffer, layers)
    if not integer:
        return flatbuffer
    count = builtin_op_count(flatbuffer, "WHILE")
    if count:
        raise ArgumentValueError(
            where, f'quantize="{quantize}" with fuse_lstm=True: the model keeps loops ({count} '
            f"WHILE op{'s' if count > 1 else ''}) beside the fused LSTM ops (a GRU or other "
            "recurrent layer, or an LSTM named in a warning above), and TensorFlow's "
            "quantizer crashes on loops; convert with fuse_lstm=False and a static length "
            "(every loop unrolled).")
    if quantize == "int16x8":
        check_fused_16x8(where, layers.values())
    return quantize_flatbuffer(where, flatbuffer, names, quantize, examples, integer_io)


# ---------------------------------------------------------------------------
# Tracing and conversion


def _traceable(where, model, input_signature, batch_size):
    """The call, its specs (batch `batch_size`, default 1) and their names."""
    if input_signature is None:
        call, specs = traceable(model, None, batch_size or 1)
    else:
        call, specs = traceable(model, _with_batch(where, input_signature, batch_size))
    # The SavedModel signature keys the inputs by name (see inputs_outputs_in_call_order).
    specs, names = signature_specs(specs)
    return call, specs, names


def _convert_with_lstm_functions(model, call, specs, names, quantize):
    """The converter's flatbuffer (fused ops not yet edited) and the routed layers."""
    layers: dict[str, FusedLayer] = {}
    with _FrozenVariables() as frozen:
        lowering = _FusedLSTM(layers, frozen)
        with lowering.keras_layers(models_of(model)):
            concrete = tf.function(flat_outputs(lowering.traced(call)), autograph=False)
            concrete = concrete.get_concrete_function(*specs)
    # The SavedModel route keeps the "lstm_<id>" functions for the converter to
    # fuse. Its trackable object holds any variable not read through Keras.
    return convert_with_signature(concrete, names, quantize), layers


def _with_batch(where, specs, batch_size):
    """`specs` with a dynamic batch dimension set to `batch_size` (default 1)."""
    fixed = []
    for spec in specs:
        shape = spec.shape
        if shape.rank:
            if shape[0] is None:
                shape = tf.TensorShape([batch_size or 1]).concatenate(shape[1:])
            elif batch_size is not None and shape[0] != batch_size:
                raise ArgumentValueError(where, f'`input_signature` has batch {shape[0]} but batch_size={batch_size}; leave the batch of the specs None or make them agree.')
        fixed.append(tf.TensorSpec(shape, spec.dtype, name=spec.name))
    return fixed


class _FrozenVariables(keras.StatelessScope):
    """Reads every Keras variable as a constant of its current value.

    The traced function then has no variables to freeze: the SavedModel route
    would otherwise leave them as resource variables.
    """

    def __init__(self):
        super().__init__(initialize_variables=False)
        self._arrays = {}
        self._reading = False

    def array(self, variable) -> np.ndarray:
        key = id(variable)
        if key not in self._arrays:
            self._reading = True  # makes `variable.value` the variable itself
            try:
                with tf.init_scope():
                    self._arrays[key] = np.asarray(variable.value)
            finally:
                self._reading = False
        return self._arrays[key]

    def get_current_value(self, variable):
        value = super().get_current_value(variable)  # assigned inside the scope
        if value is not None or self._reading:
            return value
        return tf.constant(self.array(variable))


class _FusedLSTM(BuiltinLoops):
    """The lowering of `convert_fused_lstm`: the fused kernel where it computes
    the layer; elsewhere builtin loops (`BuiltinLoops`)."""

    def __init__(self, layers: dict[str, FusedLayer], frozen: _FrozenVariables):
        super().__init__("convert_to_tflite")
        self.layers, self.frozen = layers, frozen

    def lower(self, layer, sequences, initial_state, mask, training):
        form = operator_form(getattr(layer, "cell", None))
        if not isinstance(form, LSTMForm):
            return None
        reason = _why_not_fused(layer, form, sequences, initial_state, mask, training)
        if reason is None:
            return _fused_inner_loop(layer, form, sequences, self.layers, self.frozen)
        warnings.warn(
            f"convert_fused_lstm: {type(layer).__name__} '{layer.name}' keeps its "
            f"loop (a WHILE op), not the fused LSTM kernel: {reason}.",
            stacklevel=4,
        )
        return None


def _why_not_fused(layer, form, sequences, initial_state, mask, training) -> str | None:
    """Why the fused kernel cannot compute this layer call (None: it can)."""
    if isinstance(mask, (list, tuple)):
        mask = mask[0]
    if mask is not None:
        return "it receives a mask and the kernel has no mask input"
    if layer.return_state:
        return "return_state=True and the kernel does not output the final cell state"
    if layer.stateful:
        return "stateful=True"
    if training is True:
        return "training=True"
    if any(np.ravel(getattr(layer, "zoneout", 0.0) or 0.0)):
        # At inference each state mixes with its previous value: not the kernel's LSTM.
        return "zoneout > 0 and the kernel computes a plain LSTM"
    if not (
        form.activation is keras.activations.tanh
        and form.recurrent_activation is keras.activations.sigmoid
    ):
        return "the kernel computes only activation='tanh', recurrent_activation='sigmoid'"
    if layer.compute_dtype != "float32" or sequences.dtype != tf.float32:
        return f"its compute dtype is {layer.compute_dtype}, the kernel's is float32"
    if sequences.shape[0] is None:
        return "the batch size is dynamic (set batch_size)"
    for state in initial_state:
        value = tf.get_static_value(state)
        if value is None or np.any(value):
            return "it is given an initial_state (the kernel starts from zeros)"
    return None


def _fused_inner_loop(layer, form: LSTMForm, sequences, layers: dict[str, FusedLayer], frozen):
    """`inner_loop` through a function that the converter replaces by the fused op."""
    units = form.recurrent_kernel.shape[0]
    kernel = frozen.array(form.kernel)
    recurrent_kernel = frozen.array(form.recurrent_kernel)
    bias = (np.zeros(kernel.shape[1], "float32") if form.bias is None
            else frozen.array(form.bias))
    cifg = form.coupled_input_forget
    peepholes = {
        CELL_TO_GATE[gate]: frozen.array(p)
        for gate, p in (("i", form.input_peephole), ("f", form.forget_peephole),
                        ("o", form.output_peephole))
        if p is not None
    }
    if cifg:
        # Gates f, c, o -> Keras 2's i, f, c, o with an input-gate block that
        # the edit removes (the op's CIFG mode computes i = 1 - f).
        kernel = np.concatenate([np.zeros_like(kernel[:, :units]), kernel], axis=1)
        recurrent_kernel = np.concatenate(
            [np.zeros_like(recurrent_kernel[:, :units]), recurrent_kernel], axis=1
        )
        bias = np.concatenate([np.zeros_like(bias[:units]), bias])
    weights = {}
    for g, gate in enumerate(_GATES):
        if cifg and gate == "i":
            continue
        block = slice(g * units, (g + 1) * units)
        weights[INPUT_TO_GATE[gate]] = kernel[:, block].T  # the op's weights are (units, in)
        weights[RECURRENT_TO_GATE[gate]] = recurrent_kernel[:, block].T
        weights[GATE_BIAS[gate]] = bias[block]

    api_name = f"lstm_{uuid.uuid4().hex}"
    layers[api_name] = FusedLayer(f"{type(layer).__name__} '{layer.name}'", cifg, weights, peepholes)
    zeros = tf.zeros((sequences.shape[0], units), sequences.dtype)
    last_output, outputs, *_ = _standard_lstm_function(api_name, layer.go_backwards)(
        sequences, zeros, zeros, tf.constant(kernel), tf.constant(recurrent_kernel),
        tf.constant(bias),
    )
    # The final states are not available (return_state and stateful layers
    # are not routed here), and RNN.call discards them.
    return last_output, outputs, [last_output, last_output]


def _standard_lstm_function(api_name: str, go_backwards: bool):
    """A plain LSTM in Keras 2's calling convention, marked for the converter's fusion.

    The converter (``ConvertKerasLSTMLayer``) replaces the body and keeps only
    results 0 (last output) and 1 (outputs); it fuses only if results 2-4 are
    unused, and it rebuilds them as zero constants whose value has shape (1,),
    which is valid IR only if they are declared with shape (1,).
    """

    def standard_lstm(inputs, init_h, init_c, kernel, recurrent_kernel, bias):
        def step(state, x_t):
            h, c = state
            z_i, z_f, z_c, z_o = tf.split(x_t @ kernel + h @ recurrent_kernel + bias, 4, axis=-1)
            c = tf.sigmoid(z_f) * c + tf.sigmoid(z_i) * tf.tanh(z_c)
            return tf.sigmoid(z_o) * tf.tanh(c), c

        xs = tf.transpose(inputs, (1, 0, 2))  # (T, B, in)
        if go_backwards:
            xs = tf.reverse(xs, [0])
        hs, _ = tf.scan(step, xs, initializer=(init_h, init_c))
        outputs = tf.transpose(hs, (1, 0, 2))  # (B, T, units), in processing order
        unused = tf.zeros((1,), inputs.dtype)
        return outputs[:, -1], outputs, unused, unused, unused

    standard_lstm.__name__ = api_name
    return tf.function(
        standard_lstm,
        autograph=False,
        experimental_attributes={
            "api_implements": api_name,
            "api_preferred_device": "CPU",
            "time_major": False,
            "go_backwards": go_backwards,
        },
    )
