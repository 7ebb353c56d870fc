"""Neural Turing Machine (Graves et al., 2014) with an LSTM controller."""

from __future__ import annotations

import keras
import numpy as np
from keras import initializers, ops

from keras_seq._validation import (
    check_bool,
    check_float,
    check_int,
    check_positive_int,
    invalid_value,
)
from keras_seq.layers.recurrent import backend
from keras_seq.layers.recurrent.gated_cell import (
    GatedCell,
    GatedRNN,
    delegate_to_cell,
    validate_recurrent_args,
)
from keras_seq.layers.recurrent.rnn import LoopHints

# Guards that keep every value and gradient finite (see `cosine_similarity`
# and `sharpen`); far below the values they are added to in normal operation.
COSINE_EPSILON = 1e-16
SHARPEN_EPSILON = 1e-12


def cosine_similarity(k, memory):
    """K[k, M(i)] = k·M(i) / sqrt(|k|² |M(i)|² + ε) for every head and location.

    Args:
        k: ``(B, H, W)`` keys.
        memory: ``(B, N, W)``.

    Returns:
        ``(B, H, N)``. The ε (`COSINE_EPSILON`) inside the square root keeps
        the value (0) and the gradient finite for a zero key or a zero row,
        where ``|k| |M(i)|`` would divide by zero and the gradient of a norm
        at 0 is infinite.
    """
    dot = backend.matmul(k, memory, transpose_b=True)  # (B, H, N)
    k_sq = ops.sum(k * k, axis=-1, keepdims=True)  # (B, H, 1)
    m_sq = ops.expand_dims(ops.sum(memory * memory, axis=-1), 1)  # (B, 1, N)
    return dot / ops.sqrt(k_sq * m_sq + COSINE_EPSILON)


def circular_shift(w, s, shift_range: int):
    """w̃(i) = Σ_j w(j) s(i − j), indices modulo N (a circular convolution).

    Args:
        w: ``(B, H, N)`` weightings.
        s: ``(B, H, 2·shift_range + 1)`` shift weights; entry ``p`` weighs
            the shift ``p − shift_range``.
        shift_range: int, S.

    Returns:
        ``(B, H, N)``. The rolled copies are static slices joined by concat
        (TFLite STRIDED_SLICE and CONCATENATION, no gather).
    """
    n = w.shape[-1]
    rolled = []
    for d in range(-shift_range, shift_range + 1):
        d %= n  # rolled(i) = w(i − d)
        rolled.append(w if d == 0 else ops.concatenate([w[..., n - d:], w[..., : n - d]], -1))
    return ops.sum(ops.stack(rolled, axis=-1) * ops.expand_dims(s, 2), axis=-1)


def sharpen(w, gamma):
    """w(i) = w̃(i)^γ / Σ_j w̃(j)^γ, as softmax(γ · log(w̃ + ε)).

    Args:
        w: ``(B, H, N)`` non-negative weightings w̃.
        gamma: ``(B, H, 1)``, γ ≥ 1.

    Returns:
        ``(B, H, N)``. The softmax form cannot overflow or divide 0 by 0 when
        every w̃(i)^γ underflows, and ε (`SHARPEN_EPSILON`) keeps the log and
        the gradient of the power finite where w̃(i) = 0.
    """
    return ops.softmax(ops.multiply(gamma, ops.log(w + SHARPEN_EPSILON)), axis=-1)


def validate_ntm_args(owner: str, controller_units, memory_size, memory_width, num_read_heads,
                      num_write_heads, shift_range, output_size, clip_value,
                      initial_memory) -> None:
    """Raises a clear error for a bad NTM argument (before anything is built)."""
    check_positive_int(owner, "controller_units", controller_units)
    check_positive_int(owner, "memory_size", memory_size)
    check_positive_int(owner, "memory_width", memory_width)
    check_positive_int(owner, "num_read_heads", num_read_heads)
    check_positive_int(owner, "num_write_heads", num_write_heads)
    check_int(owner, "shift_range", shift_range, minimum=0)
    if 2 * shift_range + 1 > memory_size:  # a wider shift would wrap onto itself
        raise invalid_value(
            owner, "shift_range",
            f"an integer <= {(memory_size - 1) // 2} (2 * shift_range + 1 <= memory_size "
            f"= {memory_size})", shift_range,
        )
    check_positive_int(owner, "output_size", output_size, allow_none=True)
    check_float(owner, "clip_value", clip_value, low=0.0, low_inclusive=False, allow_none=True)
    check_float(owner, "initial_memory", initial_memory, low=-1.0, high=1.0)


@keras.saving.register_keras_serializable(package="keras_seq")
class NTMCell(GatedCell):
    """One step of a Neural Turing Machine with an LSTM controller.

    N = `memory_size` locations of width W = `memory_width`; R read heads
    and H_w write heads (H = R + H_w heads in all); S = `shift_range`; u =
    `controller_units`. Every head addresses the memory M_{t-1} (§3.3):

    ```
    controller  [i, f, c̃, o] = [x_t, h_{t-1}, r_{t-1}] → LSTM → h_t, c_t
    parameters  p = clip(h_t W_p + b_p)            one matmul for all heads
    per head    k = tanh(·), β = softplus(·), g = σ(·), s = softmax(·) over
                2S+1 shifts, γ = 1 + softplus(·)
    content     w^c(i) = softmax_i(β K[k, M(i)]),  K = cosine similarity
    gate        w^g = g w^c + (1 − g) w_{t-1}
    shift       w̃(i) = Σ_j w^g(j) s(i − j)         (indices mod N)
    sharpen     w(i) = w̃(i)^γ / Σ_j w̃(j)^γ
    read        r_t = Σ_i w(i) M_{t-1}(i)           (each read head)
    write       M̃ = M_{t-1} ⊙ Π_h (1 − w_h e_hᵀ),  M_t = M̃ + Σ_h w_h a_hᵀ
                e_h = σ(·), a_h = tanh(·)           (each write head)
    output      y_t = clip([h_t, r_t] W_y + b_y)
    ```

    All erasures come before all additions, so several write heads commute
    (§3.2). `clip` clips to [−`clip_value`, `clip_value`] (Collier & Beel
    2018). Two guards keep values and gradients finite: K uses
    sqrt(|k|²|M(i)|² + 1e-16) as its denominator (a zero key or row gives
    K = 0), and sharpening is computed as softmax(γ log(w̃ + 1e-12)). Under
    mixed precision the addressing, reads and writes run in float32.

    State (a flat list; every entry `(B, size)`, the order of
    `initial_state` and of the returned states): `h (u)`, `c (u)`, read
    vectors `r (R·W)` (head-major), weightings `w (H·N)` (read heads first,
    then write heads), memory `M (N·W)` (row-major, location by location).
    Initial state (Collier & Beel 2018): h = c = 0; r = tanh(`initial_read`)
    (learned); every head's weighting is the one-hot of location 0;
    M = `initial_memory` everywhere. No weight depends on N, so trained
    weights also work with another `memory_size`.

    Weights, in `get_weights()` order (A = W + 2S + 4 addressing parameters
    per head; the biases only with `use_bias`):
    `kernel (in, 4u)`, `recurrent_kernel (u + R·W, 4u)` (rows for h_{t-1},
    then for r_{t-1}, head by head), `bias (4u,)` (LSTM gates i, f, c, o as
    in `keras.layers.LSTM`), `head_kernel (u, H·A + 2·H_w·W)`, `head_bias`,
    `output_kernel (u + R·W, output_size)` (rows for h_t, then r_t),
    `output_bias (output_size,)`, `initial_read (R, W)`. The columns of the
    head parameters: for each head (read heads first) k (W), β, g, s (2S+1),
    γ; then for each write head e (W), a (W).

    Args:
        controller_units: int, u, size of the LSTM controller.
        memory_size: int, default 128, N locations.
        memory_width: int, default 20, W, the size of a location.
        num_read_heads: int, default 1, R.
        num_write_heads: int, default 1, H_w.
        shift_range: int, default 1, S: shifts −S..S (2S + 1 ≤ N).
        output_size: int or None, default None: the size of y_t
            (None: `controller_units`).
        clip_value: float or None, default 20.0: clip of the head parameters
            and of the output (None: no clipping).
        initial_memory: float in [−1, 1], default 1e-6: the constant initial
            memory.
        unit_forget_bias: bool, default True: the controller's forget-gate
            bias starts at 1.
        initial_read_initializer: initializer of `initial_read`, default
            "glorot_uniform".
        **kwargs: `activation`, `recurrent_activation` (of the controller),
            `use_bias`, `kernel_initializer` (also of the head and output
            kernels), `recurrent_initializer`, `bias_initializer`,
            `*_regularizer`, `*_constraint`, `dropout` (of x_t),
            `recurrent_dropout` (of h_{t-1}), `seed`, `zoneout` (a float, or
            one per state in state order): as in `PeepholeLSTMCell`; and
            `keras.layers.Layer`'s.

    Examples:
        >>> import numpy as np, keras
        >>> from keras_seq.layers import NTMCell
        >>> cell = NTMCell(8, memory_size=16, memory_width=4, output_size=5)
        >>> rnn = keras.layers.RNN(cell, return_sequences=True)
        >>> rnn(np.zeros((2, 7, 3), "float32")).shape
        TensorShape([2, 7, 5])
        >>> cell.state_size
        [8, 8, 4, 32, 64]

    References:
        Graves, Wayne & Danihelka, "Neural Turing Machines", arXiv:1410.5401, 2014.
        Collier & Beel, "Implementing Neural Turing Machines", ICANN 2018.
    """

    # The output is y, not h; one step per loop iteration: the step is large, and copies of it made
    # XLA compilation and export much slower without making a step faster
    # (benchmarks/RESULTS.md, "NTM").
    loop_hints = LoopHints(pointwise_projection=True, steps_per_iteration=1)

    def __init__(
        self,
        controller_units: int,
        memory_size: int = 128,
        memory_width: int = 20,
        num_read_heads: int = 1,
        num_write_heads: int = 1,
        shift_range: int = 1,
        output_size: int | None = None,
        clip_value: float | None = 20.0,
        initial_memory: float = 1e-6,
        unit_forget_bias: bool = True,
        initial_read_initializer="glorot_uniform",
        **kwargs,
    ):
        owner = type(self).__name__
        validate_ntm_args(owner, controller_units, memory_size, memory_width, num_read_heads,
                          num_write_heads, shift_range, output_size, clip_value, initial_memory)
        check_bool(owner, "unit_forget_bias", unit_forget_bias)
        kwargs.pop("units", None)  # get_config of the base class; `controller_units` wins
        super().__init__(controller_units, **kwargs)
        self.memory_size = int(memory_size)
        self.memory_width = int(memory_width)
        self.num_read_heads = int(num_read_heads)
        self.num_write_heads = int(num_write_heads)
        self.shift_range = int(shift_range)
        self.output_size = self.units if output_size is None else int(output_size)
        self.clip_value = None if clip_value is None else float(clip_value)
        self.initial_memory = float(initial_memory)
        self.unit_forget_bias = bool(unit_forget_bias)
        self.initial_read_initializer = initializers.get(initial_read_initializer)
        n, w = self.memory_size, self.memory_width
        heads = self.num_read_heads + self.num_write_heads
        self.state_size = [self.units, self.units, self.num_read_heads * w, heads * n, n * w]

    @property
    def controller_units(self) -> int:
        return self.units

    @property
    def _addressing_size(self) -> int:
        """A: k (W), β, g, s (2S + 1), γ per head."""
        return self.memory_width + 2 * self.shift_range + 4

    def build(self, input_shape):
        input_dim = self.check_input_shape(input_shape)
        u, reads = self.units, self.num_read_heads * self.memory_width
        heads = self.num_read_heads + self.num_write_heads
        head_params = heads * self._addressing_size + 2 * self.num_write_heads * self.memory_width

        def kernel(name, shape):
            return self.add_weight(
                shape=shape, name=name, initializer=self.kernel_initializer,
                regularizer=self.kernel_regularizer, constraint=self.kernel_constraint,
            )

        def bias(name, size):
            if not self.use_bias:
                return None
            return self.add_weight(
                shape=(size,), name=name, initializer=self.bias_initializer,
                regularizer=self.bias_regularizer, constraint=self.bias_constraint,
            )

        self.kernel = kernel("kernel", (input_dim, 4 * u))
        self.recurrent_kernel = self.add_weight(
            shape=(u + reads, 4 * u),
            name="recurrent_kernel",
            initializer=self.recurrent_initializer,
            regularizer=self.recurrent_regularizer,
            constraint=self.recurrent_constraint,
        )
        self.add_bias(gates=4, forget_gate=1 if self.unit_forget_bias else None)
        self.head_kernel = kernel("head_kernel", (u, head_params))
        self.head_bias = bias("head_bias", head_params)
        self.output_kernel = kernel("output_kernel", (u + reads, self.output_size))
        self.output_bias = bias("output_bias", self.output_size)
        self.initial_read = self.add_weight(
            shape=(self.num_read_heads, self.memory_width),
            name="initial_read",
            initializer=self.initial_read_initializer,
        )
        self.built = True

    def project(self, sequence):
        return backend.project(sequence, self.kernel)  # W x; the step adds b with U [h, r]

    def _clip(self, x):
        if self.clip_value is None:
            return x
        return ops.clip(x, -self.clip_value, self.clip_value)

    def step(self, inputs, states, training=False):
        h_tm1, c_tm1, r_tm1, w_tm1, memory_tm1 = states
        n, width, S = self.memory_size, self.memory_width, self.shift_range
        R, H_w = self.num_read_heads, self.num_write_heads
        H = R + H_w
        h_in = h_tm1
        if training and self.recurrent_dropout > 0.0:
            h_in = h_tm1 * self.get_recurrent_dropout_mask(h_tm1)

        # Controller: an LSTM on [x_t, r_{t-1}]; h_{t-1} and r_{t-1} in one matmul.
        z = inputs + backend.recurrent_matmul(ops.concatenate([h_in, r_tm1], axis=-1),
                                              self.recurrent_kernel, self.bias)
        z_i, z_f, z_c, z_o = backend.split(z, 4)
        i = self.recurrent_activation(z_i)
        f = self.recurrent_activation(z_f)
        c = f * c_tm1 + i * self.activation(z_c)
        o = self.recurrent_activation(z_o)
        h = o * self.activation(c)

        # Every head's parameters from one matmul; addressing in float32 at least.
        p = self._clip(backend.recurrent_matmul(h, self.head_kernel, self.head_bias))
        dtype = "float32" if self.compute_dtype in ("float16", "bfloat16") else self.compute_dtype
        p, w_tm1, memory_tm1 = (ops.cast(t, dtype) for t in (p, w_tm1, memory_tm1))
        p_addr, p_write = backend.split(p, [H * self._addressing_size, 2 * H_w * width])
        k, beta, g, s, gamma = backend.split(
            ops.reshape(p_addr, (-1, H, self._addressing_size)), [width, 1, 1, 2 * S + 1, 1]
        )
        k = ops.tanh(k)  # (B, H, W)
        beta = ops.softplus(beta)  # (B, H, 1)
        g = ops.sigmoid(g)
        s = ops.softmax(s, axis=-1)  # (B, H, 2S + 1)
        gamma = 1.0 + ops.softplus(gamma)
        memory = ops.reshape(memory_tm1, (-1, n, width))  # (B, N, W)
        w_prev = ops.reshape(w_tm1, (-1, H, n))  # (B, H, N)

        w_c = ops.softmax(beta * cosine_similarity(k, memory), axis=-1)
        w_g = g * w_c + (1.0 - g) * w_prev
        w = sharpen(circular_shift(w_g, s, S), gamma)  # (B, H, N)
        w_read, w_write = w[:, :R], w[:, R:]

        r = backend.matmul(w_read, memory)  # (B, R, W), from M_{t-1}
        e, a = backend.split(ops.reshape(p_write, (-1, H_w, 2 * width)), 2)
        e, a = ops.sigmoid(e), ops.tanh(a)  # (B, H_w, W)
        for j in range(H_w):  # the erase products (H_w is small)
            memory = memory * (1.0 - w_write[:, j, :, None] * e[:, j, None, :])
        memory = memory + backend.matmul(w_write, a, transpose_a=True)  # Σ_h w_h a_hᵀ

        dtype = self.compute_dtype
        r = ops.cast(ops.reshape(r, (-1, R * width)), dtype)
        w = ops.cast(ops.reshape(w, (-1, H * n)), dtype)
        memory = ops.cast(ops.reshape(memory, (-1, n * width)), dtype)
        y = self._clip(backend.recurrent_matmul(ops.concatenate([h, r], axis=-1),
                                               self.output_kernel, self.output_bias))
        return y, [h, c, r, w, memory]

    def get_initial_state(self, batch_size=None):
        """h = c = 0, r = tanh(`initial_read`), one-hot weightings at 0, constant memory."""
        n, width = self.memory_size, self.memory_width
        heads = self.num_read_heads + self.num_write_heads
        dtype = self.compute_dtype
        r = ops.reshape(ops.tanh(ops.cast(self.initial_read, dtype)), (1, -1))
        one_hot = np.zeros((heads, n), dtype=dtype)
        one_hot[:, 0] = 1.0
        # One new tensor per state, tiled rather than broadcast: on PyTorch a
        # stateful layer's state variables hold these tensors' memory, which
        # must be neither shared between states nor between rows.
        return [
            ops.zeros((batch_size, self.units), dtype=dtype),
            ops.zeros((batch_size, self.units), dtype=dtype),
            ops.tile(r, (batch_size, 1)),
            ops.tile(ops.convert_to_tensor(one_hot.reshape(1, -1)), (batch_size, 1)),
            ops.full((batch_size, n * width), self.initial_memory, dtype=dtype),
        ]

    def get_config(self):
        config = super().get_config()
        del config["units"]
        config.update({
            "controller_units": self.units,
            "memory_size": self.memory_size,
            "memory_width": self.memory_width,
            "num_read_heads": self.num_read_heads,
            "num_write_heads": self.num_write_heads,
            "shift_range": self.shift_range,
            "output_size": self.output_size,
            "clip_value": self.clip_value,
            "initial_memory": self.initial_memory,
            "unit_forget_bias": self.unit_forget_bias,
            "initial_read_initializer": initializers.serialize(self.initial_read_initializer),
        })
        return config


@keras.saving.register_keras_serializable(package="keras_seq")
class NTM(GatedRNN):
    """Neural Turing Machine layer: `NTMCell` driven over time.

    Runs `NTMCell` (see its equations, state and weight layout) over the
    sequence with the input projection of all steps hoisted into one matmul
    before the loop, in the package's shared loops (the inference loop
    converts to builtin TFLite ops and to ONNX). It trains through autodiff.
    The output is y_t, of size `output_size` (default `controller_units`).

    The cell arguments (`controller_units`, `memory_size`, `memory_width`,
    `num_read_heads`, `num_write_heads`, `shift_range`, `output_size`,
    `clip_value`, `initial_memory`, `unit_forget_bias`,
    `initial_read_initializer`, `activation`, `recurrent_activation`,
    `use_bias`, `*_initializer`, `*_regularizer`, `*_constraint`, `dropout`,
    `recurrent_dropout`, `seed`, `zoneout`) are as in `NTMCell`; `activity_regularizer`,
    `return_sequences`, `return_state`, `go_backwards`, `stateful` and
    `unroll` as in `PeepholeLSTM`. With `stateful=True`, `reset_state()`
    returns to the initial state of `NTMCell` (not to zeros).

    Call arguments: `inputs (B, T, in)`, `mask (B, T)` bool (True = keep),
    `training`, `initial_state` (the five states of `NTMCell`). With
    `return_state=True` it returns `[output, h, c, r, w, M]`.

    Examples:
        >>> import numpy as np
        >>> from keras_seq.layers import NTM
        >>> layer = NTM(16, memory_size=32, memory_width=8, output_size=4,
        ...             return_sequences=True)
        >>> layer(np.zeros((2, 6, 3), "float32")).shape
        TensorShape([2, 6, 4])

    References:
        Graves, Wayne & Danihelka, "Neural Turing Machines", arXiv:1410.5401, 2014.
        Collier & Beel, "Implementing Neural Turing Machines", ICANN 2018.
    """

    cell_class = NTMCell

    def __init__(
        self,
        controller_units: int,
        memory_size: int = 128,
        memory_width: int = 20,
        num_read_heads: int = 1,
        num_write_heads: int = 1,
        shift_range: int = 1,
        output_size: int | None = None,
        clip_value: float | None = 20.0,
        initial_memory: float = 1e-6,
        unit_forget_bias: bool = True,
        initial_read_initializer="glorot_uniform",
        activation="tanh",
        recurrent_activation="sigmoid",
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        dropout: float = 0.0,
        recurrent_dropout: float = 0.0,
        seed: int | None = None,
        zoneout=0.0,
        return_sequences: bool = False,
        return_state: bool = False,
        go_backwards: bool = False,
        stateful: bool = False,
        unroll: bool = False,
        **kwargs,
    ):
        owner = type(self).__name__
        validate_ntm_args(owner, controller_units, memory_size, memory_width, num_read_heads,
                          num_write_heads, shift_range, output_size, clip_value, initial_memory)
        validate_recurrent_args(
            owner, controller_units, activation, recurrent_activation, dropout,
            recurrent_dropout, zoneout=zoneout, use_bias=use_bias, unit_forget_bias=unit_forget_bias,
        )
        kwargs.pop("units", None)  # the cell's config has it; `controller_units` is the layer's
        super().__init__(
            controller_units, memory_size=memory_size, memory_width=memory_width,
            num_read_heads=num_read_heads, num_write_heads=num_write_heads,
            shift_range=shift_range, output_size=output_size, clip_value=clip_value,
            initial_memory=initial_memory, unit_forget_bias=unit_forget_bias,
            initial_read_initializer=initial_read_initializer, activation=activation,
            recurrent_activation=recurrent_activation, use_bias=use_bias,
            kernel_initializer=kernel_initializer, recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer, bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint, bias_constraint=bias_constraint,
            dropout=dropout, recurrent_dropout=recurrent_dropout, seed=seed, zoneout=zoneout,
            return_sequences=return_sequences, return_state=return_state,
            go_backwards=go_backwards, stateful=stateful, unroll=unroll, **kwargs,
        )

    def reset_state(self):
        """Back to the cell's initial state (`NTMCell.get_initial_state`)."""
        if self.states is None:
            return
        batch_size = self.states[0].shape[0]
        for variable, value in zip(self.states, self.cell.get_initial_state(batch_size)):
            variable.assign(ops.cast(value, variable.dtype))


for _name in ("controller_units", "memory_size", "memory_width", "num_read_heads",
              "num_write_heads", "shift_range", "output_size", "clip_value", "initial_memory",
              "unit_forget_bias", "initial_read_initializer"):
    setattr(NTM, _name, delegate_to_cell(_name))
del _name
