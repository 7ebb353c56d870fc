"""The one place that picks how a recurrent step is run over time, per Keras backend.

Every recurrent layer (and the seq2seq decoder) hands this module the input
projection ``x @ W`` of all steps at once and a ``step`` that does only the
recurrent part. What runs it depends on the Keras backend:

- **TensorFlow**: the loops of `keras_seq.layers._recurrent_loops` (the
  TensorArray training loop, the builtin-convertible inference loop that
  every exporter traces, the unrolled loop) and, for training a cell with a
  hand-written derivative, the XLA-compiled backpropagation through time of
  `keras_seq.layers._bptt`. Those modules are TensorFlow and are imported
  only on this backend.
- **JAX**: ``keras.ops.scan`` (``jax.lax.scan``) over the hoisted
  projection; autodiff of the scan trains it.
- **PyTorch**: a Python loop over the time steps, as Keras' own torch
  backend runs its LSTM and GRU on the CPU; autograd trains it.

`choose_loop` names the form for one call; `run_recurrence` and `scan` run
it; `project`, `recurrent_matmul`, `split` and `matmul` are the few
operations whose best TensorFlow form differs from the plain ``keras.ops``
one. The masking rule (`mask_step`) is Keras': at a masked step the states
stay and the output is the previous output (zeros with
``zero_output_for_mask``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import keras
from keras import ops

# Loop forms. "bptt", "tensor_array" and "convertible" are TensorFlow's.
LOOP_FORMS = ("unrolled", "tensor_array", "convertible", "bptt", "scan")


def is_tensorflow() -> bool:
    """Whether Keras runs on TensorFlow (the backend with the exporters and fast paths)."""
    return keras.backend.backend() == "tensorflow"


def compiled_by_xla() -> bool:
    """Whether the code being traced now will be compiled by XLA: always on
    JAX; on TensorFlow inside a ``tf.function(jit_compile=True)`` (which is
    what Keras' ``jit_compile`` builds); never on PyTorch.

    A cell may pick the form of its step by it: XLA fuses a step's
    elementwise ops into a few kernels, TensorFlow's executor runs each one
    separately. (TensorFlow's global auto-clustering,
    ``tf.config.optimizer.set_jit``, is not seen: it reads as False.)
    """
    backend = keras.backend.backend()
    if backend == "jax":
        return True
    if backend != "tensorflow":
        return False
    import tensorflow as tf

    # The flag is private to TensorFlow; Keras 2's layers read it the same way.
    from tensorflow.python.ops import control_flow_util

    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def choose_loop(training, unroll: bool = False, bptt: bool = False) -> str:
    """The loop form of one call: the one place that weighs the call's options.

    Args:
        training: the call's ``training`` argument; only ``True`` trains.
        unroll: a Python loop over the static length (``unroll=True``).
        bptt: the cell supplies a hand-written gradient for this
            configuration (``cell.bptt_supported()``).

    Returns:
        ``"unrolled"`` with ``unroll``. On TensorFlow, when training,
        ``"bptt"`` if the cell supports it, else ``"tensor_array"`` (the
        cheapest autodiff gradient); otherwise ``"convertible"`` (the form
        Keras' exporters turn into TFLite builtins and ONNX). On JAX and
        PyTorch, ``"scan"``.
    """
    if unroll:
        return "unrolled"
    if not is_tensorflow():
        return "scan"
    if training is True:
        return "bptt" if bptt else "tensor_array"
    return "convertible"


def hoist_projection(loop: str, in_step_under_xla: bool = False) -> bool:
    """Whether the input projection ``x @ W`` of all steps runs before the
    loop (one large matmul) or inside each step.

    Hoisted everywhere but in JAX's scan on the CPU: there XLA runs the loop
    faster with each step's ``x_t @ W`` next to its ``h @ U`` than reading a
    step of a precomputed ``(T, B, P)`` projection (forward and training;
    benchmarks/RESULTS.md, "Every backend"). ``in_step_under_xla`` (a
    cell's ``projects_in_step_under_xla``) asks for the same in TensorFlow's
    inference loop when XLA compiles it and no GPU is visible.
    """
    backend = keras.backend.backend()
    if loop == "scan" and backend == "jax":
        import jax

        return jax.default_backend() != "cpu"
    if in_step_under_xla and loop == "convertible" and compiled_by_xla():
        import tensorflow as tf

        return bool(tf.config.list_logical_devices("GPU"))
    return True


# --- operations whose TensorFlow form matters ---


def _is_torch() -> bool:
    return keras.backend.backend() == "torch"


def _ops_matmul(a, b):
    """``ops.matmul``, except that float64 stays float64: Keras' type promotion
    caps at 32 bits, so its PyTorch matmul computes float64 operands in
    float32; ``ops.einsum`` keeps the dtype."""
    if keras.backend.standardize_dtype(a.dtype) == "float64":
        return ops.einsum("...ij,...jk->...ik", a, b)
    return ops.matmul(a, b)


def project(x, kernel, bias=None):
    """``x @ kernel + bias`` over the last axis of a rank-2 or rank-3 ``x``.

    On TensorFlow one 2-D matmul with ``bias_add`` (see
    `keras_seq.layers._recurrent_loops.project`); elsewhere ``keras.ops``.
    """
    if is_tensorflow():
        from keras_seq.layers._recurrent_loops import project as tf_project

        return tf_project(x, kernel, bias)
    if _is_torch():  # eager: torch's own op, without keras.ops' conversions
        import torch

        y = torch.matmul(x, kernel)
        return y if bias is None else y + bias
    y = _ops_matmul(x, kernel)
    return y if bias is None else y + bias


def recurrent_matmul(h, kernel, bias):
    """``h @ kernel + bias`` for one step; on TensorFlow in the form
    `keras_seq.layers._recurrent_loops.step_matmul_form` chose."""
    if is_tensorflow():
        from keras_seq.layers._recurrent_loops import recurrent_matmul as tf_recurrent_matmul

        return tf_recurrent_matmul(h, kernel, bias)
    if _is_torch():  # one fused kernel; the step runs eagerly, op by op
        import torch

        return torch.addmm(bias, h, kernel)
    return _ops_matmul(h, kernel) + bias


def split(x, sizes: Sequence[int] | int, axis: int = -1) -> list:
    """``x`` split along ``axis`` into pieces of the static ``sizes`` (or
    ``sizes`` equal pieces).

    On TensorFlow ``tf.split`` with the sizes themselves: ``ops.split`` with
    indices computes the sizes in the graph at every step.
    """
    if is_tensorflow():
        import tensorflow as tf

        return tf.split(x, sizes, axis=axis)
    if _is_torch():
        import torch

        if isinstance(sizes, int):
            return list(torch.chunk(x, sizes, dim=axis))
        return list(torch.split(x, list(sizes), dim=axis))
    if isinstance(sizes, int):
        return ops.split(x, sizes, axis=axis)
    indices, total = [], 0
    for size in list(sizes)[:-1]:
        total += int(size)
        indices.append(total)
    return ops.split(x, indices, axis=axis)


def matmul(a, b, transpose_a: bool = False, transpose_b: bool = False):
    """A batched matmul with optional transposes of the last two axes (one
    TensorFlow op with its transpose flags; ``keras.ops`` elsewhere)."""
    if is_tensorflow():
        import tensorflow as tf

        return tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
    if transpose_a:
        a = ops.swapaxes(a, -1, -2)
    if transpose_b:
        b = ops.swapaxes(b, -1, -2)
    return _ops_matmul(a, b)


# --- the loops ---

StepFn = Callable[[object, list], tuple]
# body(xs_t, carry) -> (outputs_t, carry), all lists.
BodyFn = Callable[[list, list], tuple]


def mask_step(mask_t, output, new_states, states, prev_output, zero_output=None):
    """Keras' masking rule for one step (``keras.ops`` form; see
    `keras_seq.layers._recurrent_loops.mask_step` for the arguments)."""
    new_states = [ops.where(mask_t, n, s) for n, s in zip(new_states, states)]
    previous = prev_output if zero_output is None else zero_output
    return ops.where(mask_t, output, previous), new_states


def run_recurrence(
    step: StepFn,
    xw,
    initial_states: Sequence,
    mask=None,
    go_backwards: bool = False,
    loop: str = "convertible",
    return_sequences: bool = False,
    zero_output_for_mask: bool = False,
    initial_output=None,
    steps_per_iteration: int | None = None,
):
    """Runs ``step`` over the time axis of the hoisted input projection.

    Same arguments and results as
    `keras_seq.layers._recurrent_loops.run_recurrence`, which runs it on
    TensorFlow. ``loop`` is what `choose_loop` returned (not ``"bptt"``:
    that is `keras_seq.layers._bptt.run_bptt_recurrence`, which needs the
    cell).

    Returns:
        ``(last_output, outputs, final_states)``: ``outputs`` is ``(B, T,
        units)`` with ``return_sequences``, else ``last_output[:, None]``.
    """
    if is_tensorflow():
        from keras_seq.layers import _recurrent_loops

        return _recurrent_loops.run_recurrence(
            step, xw, initial_states, mask=mask, go_backwards=go_backwards, loop=loop,
            return_sequences=return_sequences, zero_output_for_mask=zero_output_for_mask,
            initial_output=initial_output, steps_per_iteration=steps_per_iteration,
        )
    if mask is not None:
        # (T, B, 1) bool, time-major like xw
        mask = ops.expand_dims(ops.transpose(ops.cast(mask, "bool")), -1)
    if go_backwards:
        xw = ops.flip(xw, 0)
        if mask is not None:
            mask = ops.flip(mask, 0)

    carry = list(initial_states)
    carries_output = mask is not None or initial_output is not None
    zero_output = None
    if carries_output:
        zero_output = ops.zeros_like(carry[0]) if initial_output is None else initial_output
        carry = [zero_output, *carry]

    def body(xs_t, carry):
        if not carries_output:
            output, new_states = step(xs_t[0], carry)
            return [output], list(new_states)
        prev_output, states = carry[0], carry[1:]
        output, new_states = step(xs_t[0], states)
        if mask is not None:
            output, new_states = mask_step(
                xs_t[1], output, list(new_states), states, prev_output,
                zero_output if zero_output_for_mask else None,
            )
        return [output], [output, *new_states]

    sequences = [xw] if mask is None else [xw, mask]
    outputs, carry = scan(loop, body, sequences, carry, None, return_sequences)
    last_output = carry[0]
    states = carry[1:] if carries_output else carry
    outputs = outputs[0] if return_sequences else ops.expand_dims(last_output, 1)
    return last_output, outputs, states


def scan(loop: str, body: BodyFn, sequences, carry, templates, collect: bool = True,
         steps_per_iteration: int | None = None):
    """Runs ``body`` over the time-major ``sequences`` in the form ``loop``.

    Same arguments and results as `keras_seq.layers._recurrent_loops.scan`:
    ``body(xs_t, carry) -> (outputs_t, carry)`` (lists), ``templates`` one
    ``(B, ...)`` tensor per output (TensorFlow's loops preallocate from
    them), and the outputs come back batch-major ``(B, T, ...)``, or None
    without ``collect``. On JAX ``"scan"`` is ``keras.ops.scan``; on
    PyTorch a Python loop; ``"unrolled"`` is a Python loop everywhere.
    """
    if is_tensorflow():
        from keras_seq.layers import _recurrent_loops

        return _recurrent_loops.scan(loop, body, sequences, carry, templates, collect,
                                     steps_per_iteration)
    if loop not in ("scan", "unrolled"):
        raise ValueError(f"scan: loop {loop!r} is TensorFlow's; on the "
                         f"{keras.backend.backend()} backend it is 'scan' or 'unrolled'.")
    carry = list(carry)
    if loop == "scan" and keras.backend.backend() == "jax":

        def f(carry, xs_t):
            outputs_t, carry = body(list(xs_t), list(carry))
            return carry, (outputs_t if collect else None)

        carry, stacked = ops.scan(f, carry, list(sequences))
        if not collect:
            return None, list(carry)
        return [_batch_major(y) for y in stacked], list(carry)

    # A Python loop: PyTorch (eager, like Keras' torch backend) and unroll=True.
    if sequences[0].shape[0] is None:
        raise ValueError("unroll=True needs a static number of time steps.")
    collected = []
    for xs_t in zip(*(ops.unstack(x, axis=0) for x in sequences)):
        outputs_t, carry = body(list(xs_t), list(carry))
        if collect:
            collected.append(outputs_t)
    if not collect:
        return None, carry
    return [ops.stack(list(o), axis=1) for o in zip(*collected)], carry


def _batch_major(y):
    """(T, B, ...) -> (B, T, ...)."""
    return ops.swapaxes(y, 0, 1)
