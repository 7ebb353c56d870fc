"""Which form of a recurrent layer runs where: the one policy of the fast paths.

Every form computes the numbers of the cell's ``step`` run step by step
(to float round-off); this module alone decides which one a call runs, from
what the cell declares and from a few facts of the backend
(`keras_seq.layers.recurrent.backend`), when the layer is traced (never by
timing, except the step's matmul below). The table (``docs/contract.md``, "Which form runs where", says the
same):

| backend | device | ``training=True`` | inference, streaming, export |
|---|---|---|---|
| TensorFlow | CPU, GPU | the cell's parallel form; else its hand-written derivative (`ManualGradient`, BPTT under XLA); else autodiff of the step loop | the step loop (builtin-convertible ops) |
| JAX | CPU | the step loop for a cell whose parallel form is a scan of a few elementwise ops (``LoopHints.steps_fuse_on_cpu``: XLA fuses that loop, projection included); else the parallel form; else the step loop | the step loop |
| JAX | GPU, TPU | the parallel form; else the step loop | the step loop |
| PyTorch | CPU, GPU | the parallel form; else the step loop | the step loop |

Zoneout in training (fresh masks at every step) always runs the step loop.
A second form holds only for the ``step`` it was written with: a subclass
that redefines ``step`` or ``project`` (or, for a linear cell,
``coefficients``) and not the form runs its step loop (`declared_form`).

Inside those forms:

- **The input projection** of a cell with ``LoopHints.pointwise_projection``
  runs before the loop for all steps at once, except where XLA compiles the
  step loop on a CPU and fuses each step's ``x_t @ W`` with its other work:
  on JAX's CPU for every such cell, and on TensorFlow under XLA at inference
  for a cell that asks (``LoopHints.projects_in_step_under_xla``,
  `LayerNormLSTMCell`).
- **The linear recurrence** of the linear cells' parallel form
  (`linear_recurrence`): on a CPU a loop of one multiply-add per step, on a
  GPU a log-depth parallel scan (TensorFlow and PyTorch: Hillis and
  Steele's doubling scan; JAX: ``lax.associative_scan``).
- **A step's** ``h @ U + b`` on TensorFlow: MatMul and BiasAdd, which oneDNN
  fuses with the step's next Add (``"fused"``), or MatMul and Add
  (``"plain"``). Which is faster depends on the CPU, 2-3x at batch 1 either
  way, so by default (``"auto"``) each process times both once, the first
  time a step is traced, and keeps the faster
  (`backend_tensorflow.calibrated_step_matmul`: the one documented choice
  made by timing); ``KERAS_SEQ_STEP_MATMUL=plain|fused`` fixes it instead.

The measurements behind each choice are in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

from keras_seq.layers.recurrent import backend

__all__ = ["declared_form", "projects_before_loop", "training_form"]

PARALLEL = "parallel"
MANUAL_GRADIENT = "manual_gradient"
STEP_LOOP = "step"


def _definer(cls: type, name: str) -> type | None:
    """The class of ``cls``'s MRO that defines attribute ``name``."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass
    return None


# The methods whose numbers each second form reproduces: a subclass that
# redefines one of them has a form only if it redefines the form too. (Both
# ``step`` and ``parallel`` read the projected sequence, so ``parallel`` holds
# whatever ``project`` is; a hand-written derivative and an operator form
# include the projection.)
_WRITTEN_FOR = {
    "parallel": ("step",),
    "manual_gradient": ("step", "project"),
    "operator_form": ("step", "project", "call"),
}


def declared_form(cell, name: str):
    """The cell's second form ``name`` (``"parallel"``, ``"manual_gradient"``
    or ``"operator_form"``) as a bound method, or None where it does not
    hold for the cell's step.

    A form is written for one ``step`` (and ``project``): it holds for the
    class that defines it and for its subclasses that keep them. A class
    attribute set to None switches a form off. A linear cell's step and
    parallel form, both derived from its ``coefficients`` by the base
    class, hold together.
    """
    cls = type(cell)
    form = getattr(cell, name, None)
    owner = _definer(cls, name)
    if form is None or owner is None:
        return None
    for method in _WRITTEN_FOR[name]:
        definer = _definer(cls, method)
        if definer is not None and not issubclass(owner, definer):
            return None
    return form


def training_form(cell, zoneout_in_training: bool) -> str:
    """``"parallel"``, ``"manual_gradient"`` or ``"step"``: how a call with
    ``training=True`` runs (the table of the module docstring)."""
    if zoneout_in_training:
        return STEP_LOOP
    hints = cell.loop_hints
    if declared_form(cell, "parallel") is not None and _has_parallel_form(cell):
        if hints.steps_fuse_on_cpu and backend.FUSED_STEP_LOOP and backend.device() == "cpu":
            return STEP_LOOP
        return PARALLEL
    if backend.MANUAL_GRADIENT_LOOP:
        make = declared_form(cell, "manual_gradient")
        if make is not None and make().supported():
            return MANUAL_GRADIENT
    return STEP_LOOP


def _has_parallel_form(cell) -> bool:
    """A linear cell's (derived from its coefficients), or one the cell's
    class defines: the base class's own ``parallel``, defined beside its
    ``coefficients = None``, is the linear cells' only."""
    if getattr(cell, "coefficients", None) is not None:
        return True
    return _definer(type(cell), "parallel") is not _definer(type(cell), "coefficients")


def projects_before_loop(cell, training) -> bool:
    """Whether the layer projects every step before the loop (else each step
    projects its own input inside it; see the module docstring)."""
    hints = cell.loop_hints
    if not hints.pointwise_projection or backend.device() != "cpu":
        return True
    if backend.FUSED_STEP_LOOP:
        return False
    return not (hints.projects_in_step_under_xla and training is not True
                and backend.compiled_by_xla())
