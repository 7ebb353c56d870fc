"""An export's lowering: how a conversion asks the recurrent layers it traces for their operator forms.

A converter (the native ONNX nodes, TFLite's fused LSTM) subclasses
`Lowering` and traces ``lowering.traced(call)``, which marks the graph being
traced with the lowering (`keras_seq.layers.recurrent.backend.export_lowering`).
Every recurrent layer of this package asks it in ``inner_loop``
(`keras_seq.layers.recurrent.rnn.export_lowered`): ``lower(layer, sequences,
initial_state, mask, training)`` returns ``inner_loop``'s result written
with the operator the cell declares (`operator_forms.operator_form`), or
None, and the layer runs its own loop. Nothing is patched on a class: the
mark belongs to that one trace, so other functions, other threads and eager
calls compute as always.

Keras' own ``LSTM``, ``GRU`` and ``SimpleRNN`` layers cannot ask. For the
conversion's duration (`Lowering.keras_layers`), each one found in the
models being converted gets its own ``inner_loop`` that asks the lowering
when it runs in the marked trace and otherwise runs Keras' loop, the same
for every other caller; it is removed afterwards. Inside a plain callable
whose models the converter is not given, they keep their loop.
"""

from __future__ import annotations

import contextlib

import keras
import tensorflow as tf

from keras_seq.layers.recurrent import backend
from keras_seq.layers.recurrent.backend_tensorflow import LOWERING_ATTRIBUTE


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
    """One conversion's lowering; a subclass defines `lower`."""

    def lower(self, layer, sequences, initial_state, mask, training):
        """``inner_loop``'s ``(last_output, outputs, states)`` for ``layer``
        in the converter's form, or None (the layer runs its own loop)."""
        return None

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
            return original(sequences, initial_state, mask, training=training)

        return inner_loop
