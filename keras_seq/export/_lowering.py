"""An export's lowering: how a conversion asks the recurrent layers it traces for their operator forms.

A converter (the native ONNX nodes, TFLite's fused LSTM, TFLite's builtin
ops) subclasses `Lowering` and traces ``lowering.traced(call)``, which marks
the graph being traced with the lowering
(`keras_seq.layers.recurrent.backend.export_lowering`). Every recurrent
layer of this package asks it in ``inner_loop``
(`keras_seq.layers.recurrent.rnn.export_lowered`): ``lower(layer,
sequences, initial_state, mask, training)`` returns ``inner_loop``'s result
written with the operator the cell declares
(`operator_forms.operator_form`), or None, and the layer runs its own loop.
Nothing is patched on a class: the mark belongs to that one trace, so other
functions, other threads and eager calls compute as always.

Keras' own ``LSTM``, ``GRU``, ``SimpleRNN`` and ``RNN`` layers cannot ask.
For the conversion's duration (`Lowering.keras_layers`), each one found in
the models being converted gets its own ``inner_loop`` that asks the
lowering when it runs in the marked trace and otherwise runs Keras' loop,
the same for every other caller; it is removed afterwards. A layer the
lowering does not ``lower`` runs `Lowering.keras_loop`: Keras' own loop,
which tf2onnx converts; `BuiltinLoops` (TFLite) runs this package's loop
over the layer's own cell instead (`rnn.cell_call_loop`), as Keras' loop
of TensorArrays needs the Flex delegate with a dynamic batch or length.
Inside a plain callable whose models the converter is not given, they keep
their loop.
"""

from __future__ import annotations

import contextlib

import keras
import tensorflow as tf

from keras_seq._validation import ArgumentValueError
from keras_seq.layers.recurrent import backend
from keras_seq.layers.recurrent.backend_tensorflow import LOWERING_ATTRIBUTE
from keras_seq.layers.recurrent.rnn import cell_call_loop


def layers_of(models) -> list:
    """Every layer of ``models``, nested ones included, each once."""
    seen, found = set(), []
    for model in models:
        for layer in model._flatten_layers(include_self=True, recursive=True):
            if id(layer) not in seen:
                seen.add(id(layer))
                found.append(layer)
    return found


class Lowering:
    """One conversion's lowering; a subclass defines `lower`.

    ``integer``: the trace is quantized to integers (TFLite's int8 or
    16x8), whose quantizer needs ranges without extremes and, but for the
    loops of `loop`, a graph without loops: every other loop of a static
    length runs unrolled (`keras_seq.layers.recurrent.rnn.scan` asks), and
    an attention mask fills its masked logits within the logits' own range
    (`keras_seq.layers.attention._masking.masked_softmax` asks).
    """

    integer = False

    def loop(self, body, sequences, carry, templates, collect):
        """``rnn.scan``'s ``(outputs, carry)`` over a static length in the
        converter's loop form, or None (the loop's own form)."""
        return None

    def lower(self, layer, sequences, initial_state, mask, training):
        """``inner_loop``'s ``(last_output, outputs, states)`` for ``layer``
        in the converter's form, or None (the layer runs its own loop)."""
        return None

    def keras_loop(self, layer, own_loop, sequences, initial_state, mask, training):
        """What Keras' own ``layer`` runs where `lower` declines: its own
        loop (``own_loop``, its ``inner_loop``)."""
        return own_loop(sequences, initial_state, mask, training=training)

    def traced(self, call):
        """``call``, marking the graph it is traced in with this lowering."""

        def marked(*args):
            graph = tf.compat.v1.get_default_graph()
            setattr(graph, LOWERING_ATTRIBUTE, self)
            try:
                return call(*args)
            finally:
                delattr(graph, LOWERING_ATTRIBUTE)

        return marked

    @contextlib.contextmanager
    def keras_layers(self, models):
        """Keras' own recurrent layers of ``models`` ask this lowering too
        (see the module docstring), until the block ends."""
        hooked = []
        try:
            for layer in layers_of(models):
                if isinstance(layer, keras.layers.RNN) and not getattr(
                        layer, "asks_export_lowering", False):
                    hooked.append((layer, layer.__dict__.get("inner_loop")))
                    object.__setattr__(layer, "inner_loop", self._asking(layer))
            yield
        finally:
            for layer, own in hooked:
                if own is None:
                    del layer.__dict__["inner_loop"]
                else:
                    layer.__dict__["inner_loop"] = own

    def _asking(self, layer):
        original = layer.inner_loop

        def inner_loop(sequences, initial_state, mask, training=False):
            if backend.export_lowering() is self:
                lowered = self.lower(layer, sequences, initial_state, mask, training)
                if lowered is not None:
                    return lowered
                return self.keras_loop(layer, original, sequences, initial_state, mask, training)
            return original(sequences, initial_state, mask, training=training)

        return inner_loop


class BuiltinLoops(Lowering):
    """TFLite's builtin ops: Keras' own recurrent layers run this package's
    loop over their own cell (`rnn.cell_call_loop`: the cell's ``call`` at
    each step, Keras' numbers), which converts to builtin ops with a dynamic
    batch and length; the package's layers run their own loops.

    With ``integer_loops`` (int8), a loop of a static length keeps its loop
    in the form `keras_seq.export._loop_calibration` calibrates and
    `keras_seq.export._integer_mends.integer_loop_carries` makes integer:
    one step per iteration, each step's output written into the sequence
    the loop carries with a ``DYNAMIC_UPDATE_SLICE`` (a copy, exact in
    int8), where the package's own loop writes with a scatter, whose
    integer form fills the unwritten rows with raw zeros, not the zero
    point.

    Args:
        where: the converter's name, for messages.
        integer: the conversion quantizes to integers (see `Lowering`).
        integer_loops: loops stay loops (see above); else they run unrolled.
    """

    def __init__(self, where: str, integer: bool = False, integer_loops: bool = False):
        self.where = where
        self.integer = integer
        self.integer_loops = integer and integer_loops

    def loop(self, body, sequences, carry, templates, collect):
        if not self.integer_loops:
            return None
        return _written_loop(body, sequences, carry, templates, collect)

    def keras_layers(self, models):
        for layer in layers_of(models):
            if isinstance(layer, _CONVOLUTIONAL_RECURRENT):
                raise ArgumentValueError(
                    self.where, f"layer {layer.name!r} ({type(layer).__name__}) runs Keras' own "
                    "loop over images, which TFLite converts only with Flex ops (not "
                    "builtin); export this model with convert_to_onnx or as a SavedModel.")
        return super().keras_layers(models)

    def keras_loop(self, layer, own_loop, sequences, initial_state, mask, training):
        return cell_call_loop(layer, sequences, initial_state, mask, training)


def _written_loop(body, sequences, carry, templates, collect):
    """``body`` over the static length of the time-major ``sequences``, one
    step per iteration, each output written into a batch-major buffer."""
    from tensorflow.compiler.tf2xla.ops import gen_xla_ops

    steps = int(sequences[0].shape[0])
    buffers = []
    if collect:
        buffers = [tf.zeros([t.shape[0], steps, *t.shape[1:]], t.dtype) for t in templates]

    def loop_body(t, buffers, *carry):
        outputs_t, carry = body([tf.gather(x, t) for x in sequences], list(carry))
        if collect:
            buffers = [
                b if 0 in b.shape else gen_xla_ops.xla_dynamic_update_slice(
                    b, tf.expand_dims(o, 1),
                    tf.stack([0, t, *([0] * (len(b.shape) - 2))]))
                for b, o in zip(buffers, outputs_t)
            ]
        return (t + 1, buffers, *carry)

    result = tf.while_loop(lambda t, *_: t < steps, loop_body,
                           (tf.constant(0), buffers, *carry), maximum_iterations=steps)
    return (list(result[1]) if collect else None), list(result[2:])


# Keras' recurrent layers whose steps are convolutions over images.
_CONVOLUTIONAL_RECURRENT = (keras.layers.ConvLSTM1D, keras.layers.ConvLSTM2D,
                            keras.layers.ConvLSTM3D)
