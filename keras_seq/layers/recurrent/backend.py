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
- ``hoists_projection(training, projects_in_step_under_xla)``: whether the
  layer projects all steps before the loop;
- ``fresh_states(states, stateful)``: the initial states as the loop may
  carry them;
- ``convertible_inference(training)``: whether this call is inference in
  the loop the exporters convert (TensorFlow);
- ``bptt_available(training)``: whether a cell's hand-written gradient may
  train this call (TensorFlow only);
- ``scan(body, sequences, carry, templates, collect, training,
  steps_per_iteration)``: the loop over time;
- ``trains_in_parallel(hints)``: whether a cell with a ``parallel`` form
  trains in it (else in the step loop), from its `LoopHints`;
- ``linear_scan(a, b, h0)``: the linear recurrence h_t = a_t ⊙ h_{t-1} + b_t
  of the parallel recurrences' training form, over axis 1 of ``(B, T, n)``
  tensors, differentiable (`keras_seq.layers.recurrent.linear_recurrence`).

Only the chosen backend's module is imported, so on JAX and PyTorch nothing
here imports TensorFlow.
"""

from __future__ import annotations

import keras

BACKEND = keras.backend.backend()
if BACKEND == "tensorflow":
    from keras_seq.layers.recurrent.backend_tensorflow import TensorFlowOps as Ops
elif BACKEND == "jax":
    from keras_seq.layers.recurrent.backend_jax import JaxOps as Ops
elif BACKEND == "torch":
    from keras_seq.layers.recurrent.backend_torch import TorchOps as Ops
else:
    raise ImportError(
        f"keras_seq.layers: the recurrent layers run on the TensorFlow, JAX and PyTorch "
        f"backends; Keras runs on {BACKEND!r}. Set KERAS_BACKEND to one of them."
    )

project = Ops.project
recurrent_matmul = Ops.recurrent_matmul
matmul = Ops.matmul
split = Ops.split
layer_norm = Ops.layer_norm
compiled_by_xla = Ops.compiled_by_xla
hoists_projection = Ops.hoists_projection
fresh_states = Ops.fresh_states
convertible_inference = Ops.convertible_inference
bptt_available = Ops.bptt_available
scan = Ops.scan
linear_scan = Ops.linear_scan
trains_in_parallel = Ops.trains_in_parallel

__all__ = [
    "BACKEND", "bptt_available", "compiled_by_xla", "convertible_inference", "fresh_states", "hoists_projection",
    "layer_norm", "linear_scan", "matmul", "project", "recurrent_matmul", "scan", "split", "trains_in_parallel",
]
