"""The recurrent loop's operations on PyTorch (`keras_seq.layers.recurrent.backend` picks them).

The same operations as `backend_tensorflow.TensorFlowOps`. The loop is a
Python loop over the time steps, run eagerly, as Keras' own torch backend
runs its LSTM and GRU on the CPU; autograd trains it. The step's matmuls are
torch's own ops, without ``keras.ops``' conversions at every step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from keras import ops

BodyFn = Callable[[list, list], tuple]


class TorchOps:
    """The recurrent loop's operations on PyTorch."""

    @staticmethod
    def project(x, kernel, bias=None):
        """``x @ kernel + bias`` over the last axis."""
        y = torch.matmul(x, kernel)
        return y if bias is None else y + bias

    @staticmethod
    def recurrent_matmul(h, kernel, bias):
        """``h @ kernel + bias`` for one step, one fused kernel."""
        if bias is None:
            return torch.matmul(h, kernel)
        return torch.addmm(bias, h, kernel)

    @staticmethod
    def matmul(a, b, transpose_a: bool = False, transpose_b: bool = False):
        """A batched matmul with optional transposes of the last two axes."""
        a, b = ops.convert_to_tensor(a), ops.convert_to_tensor(b)
        if transpose_a:
            a = a.transpose(-1, -2)
        if transpose_b:
            b = b.transpose(-1, -2)
        return torch.matmul(a, b)

    @staticmethod
    def split(x, sizes: Sequence[int] | int, axis: int = -1) -> list:
        """``x`` split into pieces of the static ``sizes`` (or ``sizes`` equal pieces)."""
        if isinstance(sizes, int):
            return list(torch.chunk(x, sizes, dim=axis))
        return list(torch.split(x, [int(s) for s in sizes], dim=axis))

    @staticmethod
    def layer_norm(v, gamma, beta, epsilon: float):
        """``γ ⊙ (v − mean v) / sqrt(var v + ε) [+ β]`` over the last axis: torch's
        own kernel (the same biased variance)."""
        v, gamma = ops.convert_to_tensor(v), ops.convert_to_tensor(gamma)
        beta = None if beta is None else ops.convert_to_tensor(beta)
        return torch.nn.functional.layer_norm(v, v.shape[-1:], gamma, beta, epsilon)

    @staticmethod
    def compiled_by_xla() -> bool:
        """Never: PyTorch runs op by op."""
        return False

    @staticmethod
    def device() -> str:
        """``"gpu"`` where PyTorch sees a CUDA device (Keras puts its tensors
        there), else ``"cpu"``."""
        return "gpu" if torch.cuda.is_available() else "cpu"

    @staticmethod
    def fresh_states(states: list, stateful: bool) -> list:
        """The initial states as the loop may carry them: copies of a stateful
        layer's state variables, which autograd forbids modifying in place
        (as Keras' own loop copies them)."""
        return [ops.copy(s) for s in states] if stateful else states

    @staticmethod
    def export_lowering():
        """None: the exporters are TensorFlow's."""
        return None

    @staticmethod
    def convertible_inference(training) -> bool:
        """Never: the exporters are TensorFlow's (Keras' own loop runs here)."""
        return False

    # Hand-written derivatives are TensorFlow's; autograd trains the loop.
    MANUAL_GRADIENT_LOOP = False
    run_manual_gradient = None
    # The loop runs op by op, eagerly.
    FUSED_STEP_LOOP = False

    @staticmethod
    def scan(body: BodyFn, sequences, carry, templates, collect: bool = True, training=None,
             steps_per_iteration: int | None = None):
        """Runs ``body`` over the time-major ``sequences`` in a Python loop
        (arguments and results as `TensorFlowOps.scan`)."""
        carry = list(carry)
        collected = []
        for xs_t in zip(*(torch.unbind(x, 0) for x in sequences)):
            outputs_t, carry = body(list(xs_t), list(carry))
            if collect:
                collected.append(outputs_t)
        if not collect:
            return None, carry
        if not collected:  # zero steps
            return [ops.zeros((t.shape[0], 0, *t.shape[1:]), t.dtype) for t in templates], carry
        return [torch.stack(list(o), dim=1) for o in zip(*collected)], carry

    @staticmethod
    def linear_scan(a, b, h0):
        """``h_t = a_t ⊙ h_{t-1} + b_t`` over axis 1 of ``(B, T, n)`` tensors,
        from ``h0 (B, n)``; returns ``h (B, T, n)``.

        On the CPU a loop of one fused multiply-add per step, forwards, and
        backwards for the gradient (`_LinearScan`): autograd records two
        operations, not two per step. On a GPU (any device but the CPU) the
        parallel scan instead, in ⌈log2 T⌉ passes over the whole sequence
        (`_doubling_steps`), forwards and backwards alike. ``keras.ops.associative_scan`` is not used on
        PyTorch: it builds its buffers in float32 on the CPU whatever the
        inputs' dtype and device (benchmarks/RESULTS.md, "Parallel
        recurrences").
        """
        a, b, h0 = (ops.convert_to_tensor(x) for x in (a, b, h0))
        return _LinearScan.apply(a, b, h0)


def _linear_steps(a, b, h0, reverse: bool):
    h, outputs = h0, torch.empty_like(b)
    steps = range(b.shape[1] - 1, -1, -1) if reverse else range(b.shape[1])
    for t in steps:
        h = torch.addcmul(b[:, t], a[:, t], h)
        outputs[:, t] = h
    return outputs


def _doubling_steps(a, b, h0, reverse: bool):
    """`_linear_steps`'s result in ⌈log2 T⌉ parallel passes (Hillis and
    Steele): after the pass of offset s, (A_t, B_t) composes the steps
    t−2s+1 … t, so that h_t = A_t ⊙ h0 + B_t once s ≥ T."""
    if reverse:
        a, b = a.flip(1), b.flip(1)
    offset = 1
    while offset < a.shape[1]:
        a_before = torch.cat([torch.ones_like(a[:, :offset]), a[:, :-offset]], dim=1)
        b_before = torch.cat([torch.zeros_like(b[:, :offset]), b[:, :-offset]], dim=1)
        a, b = a * a_before, torch.addcmul(b, a, b_before)
        offset *= 2
    h = torch.addcmul(b, a, h0[:, None])
    return h.flip(1) if reverse else h


def _steps_for(device):
    return _linear_steps if device.type == "cpu" else _doubling_steps


class _LinearScan(torch.autograd.Function):
    """`TorchOps.linear_scan` with its gradient: with g_t = ∂L/∂h_t through
    all later steps, g_t = dh_t + a_{t+1} ⊙ g_{t+1} (the same recurrence,
    backwards), ∂L/∂a_t = g_t ⊙ h_{t-1}, ∂L/∂b_t = g_t, ∂L/∂h0 = a_1 ⊙ g_1."""

    @staticmethod
    def forward(ctx, a, b, h0):
        h = _steps_for(a.device)(a, b, h0, reverse=False)
        ctx.save_for_backward(a, h0, h)
        return h

    @staticmethod
    def backward(ctx, dh):
        a, h0, h = ctx.saved_tensors
        a_next = torch.cat([a[:, 1:], torch.zeros_like(a[:, :1])], dim=1)
        g = _steps_for(a.device)(a_next, dh.contiguous(), torch.zeros_like(h0), reverse=True)
        h_prev = torch.cat([h0[:, None], h[:, :-1]], dim=1)
        return g * h_prev, g, a[:, 0] * g[:, 0]
