"""`AttentionWrapper`: attention over any recurrent cell, a cell that reads a memory."""

from __future__ import annotations

import keras
from keras import ops, tree

from keras_seq._validation import check_bool, check_positive_int, invalid_type, invalid_value
from keras_seq.layers.attention._key_value_attention import KeyValueAttention
from keras_seq.layers.recurrent.rnn import RecurrentCell

__all__ = ["AttentionWrapper"]


@keras.saving.register_keras_serializable(package="keras_seq")
class AttentionWrapper(RecurrentCell):
    """A recurrent cell with attention over a memory, around any cell.

    The step of TensorFlow Addons' ``AttentionWrapper`` (Luong et al.'s
    input feeding), for one target step x_t:

        (y_t, s_t) = cell([x_t; a_{t-1}], s_{t-1})
        α_t        = attention(query=y_t, memory, α_{t-1})
        c_t        = Σ_j α_tj m_j
        a_t        = W_c [y_t; c_t]   (no bias) with ``attention_layer_size``, else c_t
        output     = a_t with ``output_attention``, else y_t

    States, in order: the cell's states, then a_t, then α_t ``(B, S)``
    (the memory's length; zeros before the first step, or the monotonic
    layers' `initial_alignments`, one-hot at the first position).

    The memory is given when the wrapping `keras_seq.layers.RNN` is called::

        decoder = RNN(AttentionWrapper(cell, BahdanauAttention(32)),
                      return_sequences=True)
        outputs = decoder(target_embeddings, memory=encoder_outputs,
                          initial_state=encoder_states)

    ``memory``: ``(B, S, d)``, e.g. an encoder's outputs; ``memory_mask``
    ``(B, S)`` (True = a real position), else the memory's Keras mask;
    ``initial_state``: the wrapped cell's states alone (a_0 and α_0 are
    then the starting ones), or all of the wrapper's. With
    ``alignment_history=True`` the RNN also returns α_t of every step,
    ``(B, T, S)``, after its output. Within a model the wrapper streams
    (`keras_seq.export.streaming_model`, the memory an input of the
    model) and converts to TFLite builtins and ONNX on TensorFlow.

    Args:
        cell: the wrapped cell: a `RecurrentCell` (this package's or a
            user's), or a Keras cell (``keras.layers.LSTMCell``, ...). Its
            input is ``[x_t; a_{t-1}]``. It may not have dropout or zoneout
            (their masks cannot be drawn inside the step loop; put
            ``Dropout`` layers around the RNN).
        attention: `BahdanauAttention`, `LuongAttention`,
            `BahdanauMonotonicAttention` or `LuongMonotonicAttention`; its
            query is the cell's output y_t (a `LuongAttention`'s ``units``
            must be that width).
        attention_layer_size: int or None: the width of a_t = W_c [y_t; c_t];
            None (default): a_t = c_t.
        alignment_history: bool, the RNN also returns every step's α_t.
        output_attention: bool, the step's output is a_t (default) or y_t.

    Weights: the cell's, then the attention's, then ``attention_layer``'s
    kernel ``(y + d, attention_layer_size)``.

    Examples:
        >>> import numpy as np
        >>> from keras_seq.layers import RNN, AttentionWrapper, BahdanauAttention, GRUCell
        >>> wrapper = AttentionWrapper(GRUCell(8), BahdanauAttention(4),
        ...                            attention_layer_size=6)
        >>> memory = np.ones((2, 7, 5), "float32")
        >>> outputs = RNN(wrapper, return_sequences=True)(np.ones((2, 3, 4), "float32"),
        ...                                               memory=memory)
        >>> tuple(outputs.shape)
        (2, 3, 6)

    References:
        Luong, Pham & Manning. Effective Approaches to Attention-based
        Neural Machine Translation. EMNLP 2015 (input feeding, W_c).
    """

    def __init__(self, cell, attention, attention_layer_size: int | None = None,
                 alignment_history: bool = False, output_attention: bool = True, **kwargs):
        super().__init__(**kwargs)
        if not (isinstance(cell, keras.layers.Layer) and hasattr(cell, "state_size")):
            raise invalid_type(self, "cell", "a recurrent cell (a layer with `state_size`)",
                               type(cell).__name__)
        if not isinstance(attention, KeyValueAttention):
            raise invalid_type(
                self, "attention", "an attention layer of keras_seq.layers (BahdanauAttention, "
                "LuongAttention, BahdanauMonotonicAttention, LuongMonotonicAttention)",
                type(attention).__name__)
        refuse_masks_of_its_own(self, cell, "put Dropout layers around the RNN")
        self.cell = cell
        self.attention = attention
        self.attention_layer_size = check_positive_int(
            self, "attention_layer_size", attention_layer_size, allow_none=True)
        self.alignment_history = check_bool(self, "alignment_history", alignment_history)
        self.output_attention = check_bool(self, "output_attention", output_attention)
        self.attention_layer = None
        if self.attention_layer_size is not None:
            self.attention_layer = keras.layers.Dense(
                self.attention_layer_size, use_bias=False, dtype=self.dtype_policy,
                name="attention_layer")
        self._memory_width = None

    # --- sizes ---

    @property
    def _cell_state_sizes(self) -> list:
        size = self.cell.state_size
        return tree.flatten(size) if isinstance(size, (list, tuple)) else [size]

    @property
    def _cell_output_size(self) -> int:
        size = getattr(self.cell, "output_size", None)
        return int(size if size is not None else self._cell_state_sizes[0])

    @property
    def _attention_size(self):
        return self.attention_layer_size or self._memory_width

    @property
    def state_size(self) -> list:
        """The cell's state sizes, a_t's width, then None: α_t's width is the memory's length."""
        return [*self._cell_state_sizes, self._attention_size, None]

    @property
    def output_size(self):
        return self._attention_size if self.output_attention else self._cell_output_size

    # --- building ---

    def build(self, input_shape, memory_shape=None):
        if memory_shape is None or len(memory_shape) != 3 or memory_shape[-1] is None:
            raise invalid_value(
                self, "memory", "a (batch, length, features) memory with known features, given "
                "when the wrapping RNN is called: RNN(wrapper)(inputs, memory=...)",
                memory_shape)
        self._memory_width = int(memory_shape[-1])
        attention_size = self._attention_size
        if not self.cell.built:
            self.cell.build((input_shape[0], input_shape[-1] + attention_size))
        query = self._cell_output_size
        if not self.attention.built:
            self.attention.build((None, query), (None, None, self._memory_width))
        if self.attention_layer is not None:
            self.attention_layer.build((None, query + self._memory_width))
        self.built = True

    # --- the memory ---

    def prepare_memory(self, memory, memory_mask=None, processed_key=None):
        """What every step reads, computed once per call: the memory, its
        mask (bool or None) and the attention's projected keys (``processed_key``
        when already computed, as `RecurrentDecoder`'s decoding does once per source)."""
        memory = ops.convert_to_tensor(memory, dtype=self.compute_dtype)
        if memory_mask is not None:
            memory_mask = ops.cast(memory_mask, "bool")
        if processed_key is None:
            processed_key = self.attention.precompute_keys(memory)
        return {"memory": memory, "mask": memory_mask, "keys": processed_key}

    def get_initial_state(self, batch_size=None, memory=None, cell_states=None):
        """The states before the first step: ``cell_states`` (else the
        cell's own initial states), a_0 = 0 and α_0 (zeros, or the monotonic
        layers' one-hot at the first position) over ``memory (B, S, d)``."""
        if memory is None:
            raise invalid_value(self, "memory", "the memory (B, S, d), to size the alignments",
                                None)
        memory = ops.convert_to_tensor(memory, dtype=self.compute_dtype)
        batch, length = ops.shape(memory)[0], ops.shape(memory)[1]
        if cell_states is None:
            start = (self.cell.get_initial_state(batch_size=batch)
                     if hasattr(self.cell, "get_initial_state") else
                     [ops.zeros((batch, size), self.compute_dtype)
                      for size in self._cell_state_sizes])
            cell_states = tree.flatten(start)
        else:
            cell_states = tree.flatten(cell_states)
            if len(cell_states) != len(self._cell_state_sizes):
                raise invalid_value(
                    self, "initial_state",
                    f"{len(self._cell_state_sizes)} tensor(s) for the wrapped cell's states, or "
                    f"{len(self.state_size)} for all of the wrapper's",
                    f"{len(cell_states)} tensor(s)")
        attention = ops.zeros((batch, self._attention_size), self.compute_dtype)
        if hasattr(self.attention, "initial_alignments"):
            alignments = self.attention.initial_alignments(memory)
        else:
            alignments = ops.zeros((batch, length), self.compute_dtype)
        return [*cell_states, attention, ops.cast(alignments, self.compute_dtype)]

    # --- one step ---

    def step(self, inputs, states, training=False, memory=None):
        if memory is None:
            raise invalid_value(
                self, "memory", "the memory, given when the wrapping RNN is called: "
                "keras_seq.layers.RNN(wrapper)(inputs, memory=...)", None)
        states = list(states)
        n = len(self._cell_state_sizes)
        cell_states, previous_attention, previous_alignments = states[:n], states[n], states[n + 1]
        y, new_cell_states = self.cell_step(inputs, previous_attention, cell_states, training)
        attention, alignments = self.attend(y, memory, previous_alignments, training)
        output = attention if self.output_attention else y
        return output, [*new_cell_states, attention, alignments]

    def cell_step(self, inputs, previous_attention, cell_states, training=False):
        """The step's first half: ``(y_t, new cell states)`` of the cell
        on ``[x_t; a_{t-1}]`` (input feeding)."""
        x = ops.concatenate([inputs, ops.cast(previous_attention, inputs.dtype)], axis=-1)
        structure = self.cell.state_size
        packed = (tree.pack_sequence_as(structure, list(cell_states))
                  if isinstance(structure, (list, tuple)) else cell_states[0])
        kwargs = {"training": training} if self.cell._call_has_training_arg else {}
        y, new_cell_states = self.cell(x, packed, **kwargs)
        return y, tree.flatten(new_cell_states)

    def attend(self, query, memory, previous_alignments, training=False, mode=None):
        """The step's second half: ``(a_t, α_t)`` for the query y_t over the
        prepared ``memory`` (`prepare_memory`). ``mode`` overrides a
        monotonic attention's own (``"hard"`` at inference, as
        `RecurrentDecoder` does)."""
        if hasattr(self.attention, "initial_alignments"):  # monotonic: reads α_{t-1}
            context, alignments = self.attention(
                query, memory["memory"], previous_alignments, value_mask=memory["mask"],
                processed_key=memory["keys"], training=training, mode=mode)
        else:
            context, alignments = self.attention(
                query, memory["memory"], value_mask=memory["mask"],
                processed_key=memory["keys"], return_attention_scores=True, training=training)
        context = ops.cast(context, query.dtype)
        attention = context
        if self.attention_layer is not None:
            attention = self.attention_layer(ops.concatenate([query, context], axis=-1))
        return attention, ops.cast(alignments, query.dtype)

    # --- saving ---

    def get_config(self):
        config = super().get_config()
        config.update({
            "cell": keras.saving.serialize_keras_object(self.cell),
            "attention": keras.saving.serialize_keras_object(self.attention),
            "attention_layer_size": self.attention_layer_size,
            "alignment_history": self.alignment_history,
            "output_attention": self.output_attention,
        })
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["cell"] = keras.saving.deserialize_keras_object(config["cell"])
        config["attention"] = keras.saving.deserialize_keras_object(config["attention"])
        return cls(**config)


def refuse_masks_of_its_own(owner, cell, advice: str) -> None:
    """A ``ValueError`` for a cell with dropout or zoneout of its own: a step
    loop draws no random masks inside it (``advice``: what to do instead)."""
    for name in ("dropout", "recurrent_dropout", "zoneout"):
        if getattr(cell, name, 0.0):
            raise invalid_value(
                owner, "cell", f"a cell without {name} (its masks cannot be drawn inside the "
                f"step loop; {advice})", f"{type(cell).__name__} with {name}={getattr(cell, name)}")
