"""Native recurrent nodes: one ONNX ``LSTM``, ``GRU`` or ``RNN`` node per recurrent layer.

ONNX has operators for whole recurrent layers: ``LSTM`` with peepholes (input
``P``) and a coupled input-forget gate (``input_forget``), ``GRU`` with
``linear_before_reset`` (Keras' ``reset_after``) and the Elman ``RNN``, with
optional initial states, final states (``Y_h``, ``Y_c``) and per-row lengths
(``sequence_lens``). `convert_to_onnx` (``native_recurrent=True``) traces the
model with `NativeRecurrence` as its lowering (`keras_seq.export._lowering`):
each recurrent layer whose cell declares an operator form
(``operator_form()``: `PeepholeLSTMCell`, `CoupledGateLSTMCell`, `GRUCell`,
their subclasses that keep their step, a user's cell that declares one, and
Keras' own ``LSTMCell``, ``GRUCell`` and ``SimpleRNNCell``) builds its
inputs and outputs in TensorFlow ops around one placeholder op (a
``tf.numpy_function`` that never runs), and tf2onnx's custom-op handler
(`NativeRecurrence.handlers`) turns each placeholder into the ONNX node, the
layer's weights becoming initializers. Both halves of a
``keras.layers.Bidirectional`` found in the converted models share one node.

Weights, in ONNX's gate order (``W`` rows i, o, f, c for the LSTM; z, r, h
for the GRU, as Keras; ``B`` = [Wb, Rb]; ``P`` = [p_i, p_o, p_f]), from the
cell's `LSTMForm`, `GRUForm` or `SimpleRNNForm`:

- an LSTM (`PeepholeLSTM`, ``keras.layers.LSTM``, `ConvertibleLSTM`): Keras'
  blocks i, f, c, o reordered; Keras' bias as Wb, Rb zero; ``P`` from the
  peepholes.
- the coupled input-forget gate (`CoupledGateLSTM`; f = σ(a), i = 1 − f,
  a = W_f x + U_f h [+ p_f ⊙ c] + b_f): ``input_forget=1``. onnxruntime then
  computes i from the input-gate slot and sets f = 1 − i, ignoring the
  forget-gate slot (``UniDirectionalLstm::GateComputations``). So the
  input-gate slot holds −a's weights (−W_f, −U_f, −b_f, peephole −p_f):
  i = σ(−a) = 1 − σ(a) and f = 1 − i = σ(a), Keras' f. The forget-gate slot
  holds +a's weights too, so that a runtime that ignores ``input_forget``
  computes f = σ(a) and i = σ(−a) = 1 − f: the same numbers.
- a GRU (`GRU`, ``keras.layers.GRU``): ``linear_before_reset`` =
  ``reset_after``, always written (cuDNN computes only 1, and onnxruntime's
  CUDA provider sends the node to the CPU only when the attribute says 0);
  with ``reset_after`` the bias rows are Wb and Rb, without it Wb and zeros.
- the Elman recurrence (``keras.layers.SimpleRNN``, `ConvertibleSimpleRNN`):
  ``RNN`` (tanh).

Masks: the valid steps of each row are gathered to the front of the
sequence, in the layer's processing order (a ``TopK`` of the positions), and
the node runs forwards with ``sequence_lens``; each Keras output is then
gathered from the node's output at the row's count of valid steps so far
(Keras repeats the last output at a masked step, or writes zeros with
``zero_output_for_mask``). So any mask is exact, not only right padding, and
the graph never reads the node's output after a row's length (onnxruntime's
CPU provider writes zeros there, TensorRT the carried state). A row with no
valid step gets its initial state back (onnxruntime would return zeros). A
``go_backwards`` layer with a mask runs forwards over its reversed valid steps:
onnxruntime's CUDA provider reverses the whole padded sequence for
``direction="reverse"``, ignoring ``sequence_lens``. A ``Bidirectional``
layer is one ``direction="bidirectional"`` node, also with a mask for LSTM
and GRU (cuDNN's variable-length API starts each row's backward pass at its
own end); ``Bidirectional(SimpleRNN)`` with a mask is two forward nodes,
since the CUDA provider's ``RNN`` runs without ``sequence_lens`` and only
masks the outputs afterwards.

A layer keeps its ``Loop`` (with a `UserWarning` naming it) when the
operators cannot compute it: zoneout (at inference each state mixes with the
previous one), activations other than tanh/sigmoid, a compute dtype other
than float32, ``training=True``. A layer whose cell declares no operator
form (`LayerNormLSTM`, the NTM, the parallel recurrences, a subclass that
redefines its cell's step) stays a ``Loop``, with the same outputs.

Execution providers (read from their source; the table and the details are in
``docs/contract.md``): the OpenVINO provider's ONNX importer drops ``P``, so
an ``LSTM`` node with peepholes computes other numbers there:
``native_recurrent="portable"`` keeps those layers' ``Loop`` instead, and
otherwise a `UserWarning` names them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import warnings

import keras
import numpy as np
import tensorflow as tf

from keras_seq._validation import ArgumentValueError
from keras_seq.export._lowering import Lowering, layers_of
from keras_seq.layers.recurrent.operator_forms import GRUForm, LSTMForm, operator_form

# The placeholder's outputs: Y, Y_h[, Y_c].
_OUTPUTS = {"LSTM": 3, "GRU": 2, "RNN": 2}
PEEPHOLE_WARNING = (
    "the OpenVINO execution provider computes an LSTM node without its peepholes "
    "(its ONNX importer drops input P)"
)


@dataclasses.dataclass(frozen=True)
class NodeForm:
    """One direction of a native node: the op, its attributes and its weights in ONNX's layout.

    ``W`` is ``(gates·H, in)``, ``R`` ``(gates·H, H)``, ``B`` ``(2·gates·H,)``
    (Wb then Rb), ``P`` ``(3H,)`` or None.
    """

    op: str
    hidden_size: int
    attributes: tuple[tuple[str, int], ...]
    W: np.ndarray
    R: np.ndarray
    B: np.ndarray
    P: np.ndarray | None = None

    def pairs_with(self, other: NodeForm) -> bool:
        """Whether both directions fit in one node (same op, size, attributes and inputs)."""
        return (
            (self.op, self.hidden_size, self.attributes) == (other.op, other.hidden_size,
                                                              other.attributes)
            and (self.P is None) == (other.P is None)
        )


@dataclasses.dataclass(frozen=True)
class _Node:
    """What a placeholder becomes: its forms (one per direction) and its optional inputs."""

    forms: tuple[NodeForm, ...]
    direction: str
    has_lengths: bool
    has_initial_state: bool


def _read(variable) -> np.ndarray:
    """A Keras variable's value as a float32 array, also while a function is traced."""
    with tf.init_scope():
        return np.array(variable.numpy(), np.float32)


def _blocks(matrix: np.ndarray, gates: int) -> list[np.ndarray]:
    """The gate blocks of the columns of a ``(rows, gates·H)`` Keras matrix, transposed."""
    return [block.T for block in np.split(matrix, gates, axis=-1)]


def _bias(bias, size: int) -> np.ndarray:
    return np.zeros(size, np.float32) if bias is None else _read(bias)


def _lstm(form: LSTMForm) -> NodeForm:
    """Keras' LSTM blocks i, f, c, o as ONNX's i, o, f, c, peepholes as ``P``."""
    units = form.recurrent_kernel.shape[0]
    if form.coupled_input_forget:
        return _coupled_gate_lstm(form, units)
    order = (0, 3, 1, 2)  # i, o, f, c from i, f, c, o

    def onnx_order(matrix):
        blocks = _blocks(matrix, 4)
        return np.concatenate([blocks[g] for g in order])

    bias = np.split(_bias(form.bias, 4 * units), 4)
    P = None
    if form.has_peepholes or form.input_peephole is not None:
        p_i, p_f, p_o = (_bias(p, units) for p in (form.input_peephole, form.forget_peephole,
                                                   form.output_peephole))
        P = np.concatenate([p_i, p_o, p_f])
    return NodeForm(
        "LSTM", units, (),
        onnx_order(_read(form.kernel)), onnx_order(_read(form.recurrent_kernel)),
        np.concatenate([*(bias[g] for g in order), np.zeros(4 * units, np.float32)]), P,
    )


def _coupled_gate_lstm(form: LSTMForm, units: int) -> NodeForm:
    """CIFG as ``input_forget=1``: slot i holds −a (f = 1 − σ(−a) = σ(a)), slot f +a."""
    w_f, w_c, w_o = _blocks(_read(form.kernel), 3)
    r_f, r_c, r_o = _blocks(_read(form.recurrent_kernel), 3)
    b_f, b_c, b_o = np.split(_bias(form.bias, 3 * units), 3)
    P = None
    if form.has_peepholes:
        p_f, p_o = _bias(form.forget_peephole, units), _bias(form.output_peephole, units)
        P = np.concatenate([-p_f, p_o, p_f])
    return NodeForm(
        "LSTM", units, (("input_forget", 1),),
        np.concatenate([-w_f, w_o, w_f, w_c]), np.concatenate([-r_f, r_o, r_f, r_c]),
        np.concatenate([-b_f, b_o, b_f, b_c, np.zeros(4 * units, np.float32)]), P,
    )


def _gru(form: GRUForm) -> NodeForm:
    """Keras' z, r, h blocks as they are; Keras' bias rows (input, recurrent) as Wb, Rb."""
    units = form.recurrent_kernel.shape[0]
    if form.reset_after:
        bias = _bias(form.bias, 6 * units).reshape(-1)  # (2, 3u): input row, then recurrent row
    else:
        bias = np.concatenate([_bias(form.bias, 3 * units), np.zeros(3 * units, np.float32)])
    return NodeForm(
        "GRU", units, (("linear_before_reset", int(form.reset_after)),),
        _read(form.kernel).T, _read(form.recurrent_kernel).T, bias,
    )


def _simple_rnn(form) -> NodeForm:
    units = form.recurrent_kernel.shape[0]
    return NodeForm(
        "RNN", units, (),
        _read(form.kernel).T, _read(form.recurrent_kernel).T,
        np.concatenate([_bias(form.bias, units), np.zeros(units, np.float32)]),
    )


def _node_form(form) -> NodeForm:
    """The ONNX node of a cell's operator form."""
    if isinstance(form, LSTMForm):
        return _lstm(form)
    if isinstance(form, GRUForm):
        return _gru(form)
    return _simple_rnn(form)


def _op(form) -> str:
    return "LSTM" if isinstance(form, LSTMForm) else "GRU" if isinstance(form, GRUForm) else "RNN"


def _why_not_native(layer, form, training) -> str | None:
    """Why the ONNX operator cannot compute this call of a layer with an
    operator form (None: it can)."""
    if training is True:
        return "it is called with training=True"
    if any(np.ravel(getattr(layer, "zoneout", 0.0) or 0.0)):
        return "zoneout > 0 (at inference each state mixes with its previous value)"
    recurrent = getattr(form, "recurrent_activation", keras.activations.sigmoid)
    if form.activation is not keras.activations.tanh or recurrent is not keras.activations.sigmoid:
        return "the ONNX nodes written here use only activation='tanh' and " \
               "recurrent_activation='sigmoid'"
    if layer.compute_dtype != "float32":
        return f"its compute dtype is {layer.compute_dtype}, the nodes' is float32"
    return None


class NativeRecurrence(Lowering):
    """The native nodes of one conversion: the lowering of its trace and the tf2onnx handler.

    Args:
        where: the converter's name, for messages.
        portable: keep the ``Loop`` of layers whose node some execution
            provider computes otherwise (``P``: the OpenVINO provider).
    """

    def __init__(self, where: str, portable: bool = False):
        self.where = where
        self.portable = portable
        self.nodes: dict[str, _Node] = {}  # placeholder token -> node
        # id(forward layer) -> its Bidirectional, id(backward layer) -> its Bidirectional.
        self._forward_of: dict[int, object] = {}
        self._backward_of: dict[int, object] = {}
        # id(layer) -> its inner_loop result computed with the other direction,
        # or its form when the other direction could not share its node.
        self._stash: dict[int, tuple] = {}
        self._forms: dict[int, NodeForm | None] = {}
        self._peephole_layers: list[str] = []

    @contextlib.contextmanager
    def routing(self, models=()):
        """While the model is traced (and tf2onnx runs): Keras' own recurrent
        layers of ``models`` ask this lowering, and the directions of their
        ``Bidirectional`` layers share one node."""
        for layer in layers_of(models):
            if isinstance(layer, keras.layers.Bidirectional):
                self._forward_of[id(layer.forward_layer)] = layer
                self._backward_of[id(layer.backward_layer)] = layer
        # (tf2onnx's warnings, such as the shapes TensorFlow does not know
        # for the placeholders, are dropped by `onnx_export._from_function`.)
        with self.keras_layers(models):
            yield self
        if self._peephole_layers and not self.portable:
            warnings.warn(
                f"{self.where}: {', '.join(self._peephole_layers)}: "
                f"{PEEPHOLE_WARNING}; native_recurrent='portable' keeps their Loop, which "
                "every provider computes as onnxruntime's CPU provider does.",
                stacklevel=4,  # the converter's caller
            )

    def handlers(self) -> dict:
        """tf2onnx's ``custom_op_handlers``: each placeholder becomes its node."""
        return {"PyFunc": (self._write_node, [])}

    # ------------------------------------------------------------------
    # Tracing

    def _form(self, layer, training, owner=None) -> NodeForm | None:
        """The layer's `NodeForm`, or None (its loop runs; a warning says why
        when its cell has an operator form that this call cannot use).

        ``owner``: the ``Bidirectional`` that holds ``layer``, for messages.
        """
        declared = operator_form(getattr(layer, "cell", None))
        if declared is None:
            return None
        if owner is None:
            label = f"{type(layer).__name__} '{layer.name}'"
        else:
            label = f"Bidirectional '{owner.name}' ({type(layer).__name__})"
        reason = _why_not_native(layer, declared, training)
        form = None if reason else _node_form(declared)
        if form is not None and form.P is not None:
            if self.portable:
                reason = f"native_recurrent='portable' and {PEEPHOLE_WARNING}"
                form = None
            elif label not in self._peephole_layers:
                self._peephole_layers.append(label)
        if reason:
            warnings.warn(
                f"{self.where}: {label} keeps its Loop, not an ONNX {_op(declared)} node: "
                f"{reason}.",
                stacklevel=5,
            )
        return form

    def lower(self, layer, sequences, initial_state, mask, training):
        key = id(layer)
        states = list(initial_state) if isinstance(initial_state, (list, tuple)) else [
            initial_state]
        stashed = self._stash.pop(key, None)
        if stashed is not None and all(_is_zero(s) for s in states):
            return stashed  # computed with the forward direction (Bidirectional)
        if key in self._forward_of and key not in self._forms:
            paired = self._lower_pair(self._forward_of[key], sequences, states, mask, training)
            if paired is not None:
                return paired
        if key in self._forms:  # decided (and warned about) with its Bidirectional
            form = self._forms.pop(key)
        else:
            form = self._form(layer, training, owner=self._backward_of.get(key))
        if form is None:
            return None
        return self._native([form], [layer], sequences, [states], mask)[0]

    def _lower_pair(self, bidirectional, sequences, states, mask, training):
        """Both directions of a ``Bidirectional`` in one node: the forward
        layer's result (the backward one's is stashed for its own call), or
        None (each direction decides alone)."""
        forward, backward = bidirectional.forward_layer, bidirectional.backward_layer
        if not all(_is_zero(s) for s in states):
            return None  # states given to the Bidirectional: one node per direction
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        forms = [self._form(sub, training, owner=bidirectional) for sub in (forward, backward)]
        if (
            None in forms
            or not forms[0].pairs_with(forms[1])
            or (forms[0].op == "RNN" and mask is not None)  # two forward nodes (module docstring)
        ):
            self._forms[id(forward)], self._forms[id(backward)] = forms
            return None
        results = self._native(forms, [forward, backward], sequences, [None, None], mask)
        self._stash[id(backward)] = results[1]
        return results[0]

    def _native(self, forms, layers, sequences, initial_states, mask) -> list[tuple]:
        """``inner_loop``'s ``(last_output, outputs, states)`` of each layer, from one node.

        One layer (forward or ``go_backwards``), or the forward then the
        backward layer of a ``Bidirectional`` (two forms).
        """
        bidirectional = len(forms) == 2
        x = tf.cast(sequences, tf.float32)
        length = tf.shape(x)[1]
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        lengths = None
        if mask is not None:
            mask = tf.cast(mask, tf.bool)
            lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)  # (B,)
            x = _valid_steps_first(x, mask, descending=not bidirectional and layers[0].go_backwards)
            direction = "bidirectional" if bidirectional else "forward"
        elif bidirectional:
            direction = "bidirectional"
        else:
            direction = "reverse" if layers[0].go_backwards else "forward"
        initial = [None if s is None or all(_is_zero(t) for t in s) else s for s in initial_states]
        y, *finals = self._placeholder(forms, direction, x, lengths, initial, layers[0].name)

        results = []
        for d, layer in enumerate(layers):
            y_d = tf.transpose(y[:, d], (1, 0, 2))  # (B, T, H) at the node's positions
            states = [f[d] for f in finals]
            if mask is None:
                last = states[0]
                outputs = tf.reverse(y_d, [1]) if direction == "reverse" or d == 1 else y_d
            else:
                start = initial[d] or [tf.zeros_like(s) for s in states]
                last, outputs, states = _masked_outputs(
                    layer, y_d, states, start, mask, lengths, length, reverse_half=d == 1
                )
            if not layer.return_sequences:
                outputs = last[:, None]
            results.append((last, outputs, states))
        return results

    def _placeholder(self, forms, direction, x, lengths, initial, name):
        """The op that becomes the node: ``(Y, Y_h[, Y_c])`` of ONNX's shapes."""
        op, hidden = forms[0].op, forms[0].hidden_size
        inputs = [tf.transpose(x, (1, 0, 2))]  # (T, B, in): ONNX's layout 0
        if lengths is not None:
            # Every row runs at least one step: runtimes treat length 0 each
            # their own way (onnxruntime's CPU provider returns zero states,
            # its CUDA provider runs one step and zeroes it). The states of a
            # row without a valid step are its initial ones, set after the node.
            inputs.append(tf.maximum(lengths, 1))
        has_initial = any(s is not None for s in initial)
        if has_initial:
            for i in range(2 if op == "LSTM" else 1):
                per_direction = [
                    tf.zeros((tf.shape(x)[0], hidden)) if s is None else tf.cast(s[i], tf.float32)
                    for s in initial
                ]
                inputs.append(tf.stack(per_direction))  # (directions, B, H)
        outputs = tf.numpy_function(
            _never_run, inputs, [tf.float32] * _OUTPUTS[op], stateful=True,
            name=f"{_op_name(name)}_{op}",
        )
        token = outputs[0].op.get_attr("token").decode()
        self.nodes[token] = _Node(tuple(forms), direction, lengths is not None, has_initial)
        # The op has no shape function: the shapes must survive into the graph
        # tf2onnx imports (ops such as a concatenation on axis -1 need the rank).
        directions = len(forms) if direction == "bidirectional" else 1
        return [
            tf.ensure_shape(outputs[0], [None, directions, None, hidden]),
            *(tf.ensure_shape(output, [directions, None, hidden]) for output in outputs[1:]),
        ]

    # ------------------------------------------------------------------
    # tf2onnx

    def _write_node(self, ctx, node, name, args):
        """tf2onnx's handler: the placeholder ``node`` becomes the ONNX node, in place."""
        from tf2onnx import utils

        spec = self.nodes.get(node.get_attr_str("token"))
        if spec is None:
            raise ArgumentValueError(self.where, f'the function calls tf.numpy_function or tf.py_function (op {node.name!r}); ONNX has no such operator.')
        forms = spec.forms
        op = forms[0].op

        def constant(label, arrays):
            return ctx.make_const(utils.make_name(f"{node.name}_{label}"), np.stack(arrays)).output[0]

        x, *rest = node.input
        lengths = rest.pop(0) if spec.has_lengths else ""
        initial = rest if spec.has_initial_state else []
        inputs = [
            x,
            constant("W", [f.W for f in forms]),
            constant("R", [f.R for f in forms]),
            constant("B", [f.B for f in forms]),
            lengths,
            initial[0] if initial else "",
        ]
        if op == "LSTM":
            inputs.append(initial[1] if initial else "")
            if forms[0].P is not None:
                inputs.append(constant("P", [f.P for f in forms]))
        while inputs[-1] == "":
            inputs.pop()
        ctx.replace_inputs(node, inputs)
        node.type = op
        for attribute in list(node.attr):
            del node.attr[attribute]
        node.set_attr("hidden_size", forms[0].hidden_size)
        node.set_attr("direction", spec.direction)
        for attribute, value in forms[0].attributes:
            node.set_attr(attribute, value)
        directions = len(forms) if spec.direction == "bidirectional" else 1
        ctx.set_shape(node.output[0], [-1, directions, -1, forms[0].hidden_size])
        for output in node.output[1:]:
            ctx.set_shape(output, [directions, -1, forms[0].hidden_size])


def _masked_outputs(layer, y, states, start, mask, lengths, length, reverse_half):
    """Keras' masked ``(last_output, outputs, states)`` from a node run on valid steps only.

    ``y`` ``(B, T, H)``: the node's output at each position of the gathered
    valid steps (forward: after k + 1 of them; the reverse half of a
    bidirectional node: after the steps from the row's last down to k).
    """
    in_order = tf.reverse(mask, [1]) if layer.go_backwards else mask  # processing order
    done = tf.cumsum(tf.cast(in_order, tf.int32), axis=1)  # valid steps processed, (B, T)
    has_steps = lengths > 0
    states = [tf.where(has_steps[:, None], s, s0) for s, s0 in zip(states, start)]
    zero_output = bool(getattr(layer, "zero_output_for_mask", False))
    last_counts = has_steps & (in_order[:, -1] | (not zero_output))
    last = tf.where(last_counts[:, None], states[0], tf.zeros_like(states[0]))
    outputs = None
    if layer.return_sequences:
        position = lengths[:, None] - done if reverse_half else done - 1
        position = tf.where(done > 0, tf.minimum(position, length - 1), 0)
        outputs = tf.gather(y, position, batch_dims=1)
        counts = done > 0
        if zero_output:
            counts &= in_order
        outputs = tf.where(tf.expand_dims(counts, -1), outputs, tf.zeros_like(outputs))
    return last, outputs, states


def _valid_steps_first(x, mask, descending):
    """Each row's valid steps first (in time order, or reversed), then its masked ones."""
    length = tf.shape(x)[1]
    t = tf.range(length)[None, :]
    if descending:
        t = length - 1 - t
    key = tf.where(mask, t, t + length)  # distinct: the order is exact
    _, order = tf.math.top_k(-key, k=length)
    return tf.gather(x, order, batch_dims=1)


def _is_zero(tensor) -> bool:
    """Whether a traced state is zeros (RNN's own initial state): the node then omits it."""
    value = tf.get_static_value(tensor)
    if value is not None:
        return not np.any(value)
    op = tensor.op
    while op.type in ("Identity", "Cast") and op.inputs:
        op = op.inputs[0].op
    if op.type == "Fill":
        fill = tf.get_static_value(op.inputs[1])
        return fill is not None and not np.any(fill)
    return op.type == "ZerosLike"


def _never_run(*_):
    raise RuntimeError(
        "a native recurrent node's placeholder runs only in the ONNX file it becomes"
    )


def _op_name(name: str) -> str:
    """``name`` as a TensorFlow op name (the ONNX node keeps it)."""
    name = re.sub(r"[^A-Za-z0-9_.\-/]", "_", name)
    return name if re.match(r"[A-Za-z0-9.]", name) else f"layer{name}"
