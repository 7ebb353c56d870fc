"""The recurrent loop's operations for the Keras backend, chosen once, at import.

Every backend module has one class with the same operations
(`backend_tensorflow.TensorFlowOps`, `backend_jax.JaxOps`,
`backend_torch.TorchOps`); this module picks the one for
``keras.backend.backend()`` and names its operations here, so that a cell
or the loop calls ``backend.split(...)`` with no backend branch of its own:

- ``project(x, kernel, bias=None)``: ``x @ kernel + bias`` over the last axis;
- ``recurrent_matmul(h, kernel, bias)``: a step's ``h @ kernel + bias``;
- ``matmul(a, b, transpose_a=False, transpose_b=False)``: a batched matmul;
- ``split(x, sizes, axis=-1)``: static splits;
- ``layer_norm(v, gamma, beta, epsilon)``: layer normalisation over the last axis;
- ``compiled_by_xla()``: whether the code traced now is compiled by XLA;
- ``device()``: ``"cpu"`` or ``"gpu"``, where the traced code runs;
- ``fresh_states(states, stateful)``: the initial states as the loop may
  carry them;
- ``convertible_inference(training)``: whether this call is inference in
  the loop the exporters convert (TensorFlow);
- ``export_lowering()``: the lowering of the export being traced, which a
  recurrent layer asks for its operator form (TensorFlow; else None);
- ``scan(body, sequences, carry, templates, collect, training,
  steps_per_iteration)``: the loop over time;
- ``linear_scan(a, b, h0)``: the linear recurrence h_t = a_t ⊙ h_{t-1} + b_t
  of the parallel recurrences' training form, over axis 1 of ``(B, T, n)``
  tensors, differentiable (`keras_seq.layers.recurrent.linear_recurrence`);
- ``run_manual_gradient(gradient, xs, states, **options)``: a cell's training
  loop with its hand-written derivative (None where the backend has none);

and two facts that `keras_seq.layers.recurrent.fast_paths`, the one policy
of which form runs where, reads: ``MANUAL_GRADIENT_LOOP`` (the backend has
that loop) and ``FUSED_STEP_LOOP`` (its compiled step loop fuses each step,
projection included).

Only the chosen backend's module is imported, so on JAX and PyTorch nothing
here imports TensorFlow. On Keras' other backends (numpy, OpenVINO) the
package imports and its other layers work; a recurrent layer refuses when
it is made (`check_supported`).
"""

from __future__ import annotations

import keras

BACKEND = keras.backend.backend()
SUPPORTED = ("tensorflow", "jax", "torch")


def check_supported(owner: str) -> None:
    """Raises a one-line `RuntimeError` naming ``owner`` and Keras' backend
    where the recurrent loop does not run (Keras' numpy and OpenVINO
    backends): the package imports there, and only a recurrent layer refuses."""
    if BACKEND not in SUPPORTED:
        raise RuntimeError(
            f"{owner}: the recurrent layers run on the TensorFlow, JAX and PyTorch backends; "
            f"Keras runs on {BACKEND!r}. Set KERAS_BACKEND to one of them."
        )


class _Unsupported:
    """Where no recurrent loop runs: every operation refuses (`check_supported`)."""

    MANUAL_GRADIENT_LOOP = False
    FUSED_STEP_LOOP = False
    run_manual_gradient = None

    def __getattr__(self, name):
        def refuse(*args, **kwargs):
            check_supported(f"keras_seq.layers.recurrent.backend.{name}")

        return refuse


if BACKEND == "tensorflow":
    from keras_seq.layers.recurrent.backend_tensorflow import TensorFlowOps as Ops
elif BACKEND == "jax":
    from keras_seq.layers.recurrent.backend_jax import JaxOps as Ops
elif BACKEND == "torch":
    from keras_seq.layers.recurrent.backend_torch import TorchOps as Ops
else:
    Ops = _Unsupported()

project = Ops.project
recurrent_matmul = Ops.recurrent_matmul
matmul = Ops.matmul
split = Ops.split
layer_norm = Ops.layer_norm
compiled_by_xla = Ops.compiled_by_xla
device = Ops.device
fresh_states = Ops.fresh_states
convertible_inference = Ops.convertible_inference
export_lowering = Ops.export_lowering
scan = Ops.scan
linear_scan = Ops.linear_scan
run_manual_gradient = Ops.run_manual_gradient
MANUAL_GRADIENT_LOOP = Ops.MANUAL_GRADIENT_LOOP
FUSED_STEP_LOOP = Ops.FUSED_STEP_LOOP

__all__ = [
    "BACKEND", "SUPPORTED", "check_supported", "FUSED_STEP_LOOP", "MANUAL_GRADIENT_LOOP", "compiled_by_xla", "convertible_inference",
    "device", "export_lowering", "fresh_states", "layer_norm", "linear_scan", "matmul", "project", "recurrent_matmul",
    "run_manual_gradient", "scan", "split",
]
