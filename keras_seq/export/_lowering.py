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
    16x8), whose quantizer needs a graph without loops and ranges without
    extremes: every loop of a static length runs unrolled
    (`keras_seq.layers.recurrent.rnn.scan` asks), and an attention mask
    fills its masked logits within the logits' own range
    (`keras_seq.layers.attention._masking.masked_softmax` asks).
    """

    integer = False

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

    Args:
        where: the converter's name, for messages.
        integer: the conversion quantizes to integers (see `Lowering`).
    """

    def __init__(self, where: str, integer: bool = False):
        self.where = where
        self.integer = integer

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


# Keras' recurrent layers whose steps are convolutions over images.
_CONVOLUTIONAL_RECURRENT = (keras.layers.ConvLSTM1D, keras.layers.ConvLSTM2D,
                            keras.layers.ConvLSTM3D)
