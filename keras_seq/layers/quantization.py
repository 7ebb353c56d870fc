"""Keras' int8 quantization (``model.quantize("int8")``) on the package's layers.

`keras.Model.quantize` calls ``quantize`` on every layer that has no
sublayers; for a recurrent layer that is its cell, and the attention
mechanisms that own their kernels (`BahdanauAttention`, `LuongAttention`)
are others. They answer it with `KernelQuantization`: every weight whose attribute name ends in
``kernel`` (Keras' naming: ``kernel``, ``recurrent_kernel``,
``head_kernel``, ``query_kernel``, ...) is stored as int8 with one float
scale per output channel (the last axis; the largest magnitude maps to
127, as Keras' Dense quantizes its kernel), and reads back dequantized,
``int8 * scale``, wherever the cell's code reads the attribute: its
projection, its step, every fast path and exporter. Biases, peepholes and
norms stay in float. The cell's dtype policy becomes
``int8_from_<policy>``, so that a ``.keras`` file rebuilds the int8 weights
and reloads quantized; the kernels are no longer trainable (as Dense's).

What this gives is Keras' storage (a quarter of the kernels' bytes) with
the float computation of the step: activations are not quantized, since a
cell's step feeds its own output back (Keras' Dense quantizes its inputs
per call; a recurrence would accumulate that rounding at every step). A
cell with no weight named ``*kernel`` raises Keras' ``NotImplementedError``,
which `keras.Model.quantize` turns into its warning and goes on.
"""

from __future__ import annotations

import numpy as np
from keras import dtype_policies, ops

_KERNEL_SUFFIX = "kernel"


class KernelQuantization:
    """Keras' quantization hooks for a layer whose weights are ``*kernel``
    attributes (see the module docstring). Mixed in before
    `keras.layers.Layer`."""

    def kernel_names(self) -> list[str]:
        """The attributes quantized: float weights of rank >= 2 named ``*kernel``."""
        import keras

        return [name for name, value in vars(self).items()
                if name.endswith(_KERNEL_SUFFIX) and isinstance(value, keras.Variable)
                and len(value.shape) >= 2 and "float" in str(value.dtype)]

    def quantize(self, mode=None, type_check=True, config=None):
        if mode != "int8":
            raise self._not_implemented_error(
                self.quantize, f"{type(self).__name__} quantizes to int8 only; received "
                f"mode={mode!r}.")
        names = self.kernel_names()
        if not names:
            raise self._not_implemented_error(
                self.quantize, f"{type(self).__name__} has no weight named '*kernel' to "
                "store as int8; it stays in float.")
        quantized = {name: int8_with_scale(np.asarray(getattr(self, name).numpy()))
                     for name in names}
        self.quantized_build(None, mode)
        for name, (values, scale) in quantized.items():
            getattr(self, _int8(name)).assign(values)
            getattr(self, _scale(name)).assign(scale)
        if self.dtype_policy.quantization_mode is None:  # else set by the caller (a reload)
            self.dtype_policy = dtype_policies.get(f"int8_from_{self.dtype_policy.name}")

    def quantized_build(self, input_shape, mode):
        """Replaces each ``*kernel`` weight by an int8 weight and its scales
        (zeros and ones: `quantize` or a loaded file fills them)."""
        if mode != "int8":
            raise self._quantization_mode_error(mode)
        names = self.kernel_names()
        shapes = {name: tuple(getattr(self, name).shape) for name in names}
        for name in names:
            self._drop_weight(name)
            setattr(self, _int8(name), self.add_weight(
                name=name, shape=shapes[name], initializer="zeros", dtype="int8",
                trainable=False))
            setattr(self, _scale(name), self.add_weight(
                name=f"{name}_scale", shape=shapes[name][-1:], initializer="ones",
                trainable=False))
        self._int8_kernels = tuple(names)
        self._is_quantized = True

    def _drop_weight(self, name):
        # What `keras.layers.Layer.__delattr__` does for a variable but its
        # full garbage collection (0.24 s each with TensorFlow loaded: 18 of
        # the 21 s a model of 12 recurrent layers took to quantize and
        # reload); the kernel's memory goes when its last reference does.
        import keras

        self._untrack_variable(getattr(self, name))
        super(keras.layers.Layer, self).__delattr__(name)

    def _post_build(self):
        super()._post_build()
        # A cell loaded from a file with an int8 policy: the int8 weights the
        # file holds (built before `load_own_variables` fills them).
        if self.quantization_mode == "int8" and not getattr(self, "_is_quantized", False):
            self.quantized_build(None, "int8")

    def _int8_call(self, *args, **kwargs):
        # The kernels read back dequantized: the cell's own call.
        return self.call(*args, **kwargs)

    def __getattr__(self, name):
        # Reached only when `name` is not an attribute: a quantized kernel.
        kernels = self.__dict__.get("_int8_kernels", ())
        if name in kernels:
            dtype = self.compute_dtype
            return (ops.cast(self.__dict__[_int8(name)], dtype)
                    * ops.cast(self.__dict__[_scale(name)], dtype))
        getter = getattr(super(), "__getattr__", None)
        if getter is not None:
            return getter(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class SublayerQuantization:
    """Keeps in its config which of its sublayers `keras.Model.quantize`
    quantized (the Dense and EinsumDense of an attention layer or a
    Transformer block: Keras quantizes each), as ``sublayer_dtypes``
    (their paths under the layer, and their dtype policies): built again
    from the config, it quantizes the same sublayers, so that a ``.keras``
    file reloads with their int8 weights. Keras' own MultiHeadAttention
    does not (its reload fails). Mixed in before the layer class; the
    layer's ``__init__`` passes ``sublayer_dtypes`` here."""

    def __init__(self, *args, sublayer_dtypes=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._sublayer_dtypes = dict(sublayer_dtypes or {})

    def get_config(self):
        config = super().get_config()
        quantized = {path: dtype_policies.serialize(layer.dtype_policy)
                     for path, layer in _named_sublayers(self).items()
                     if layer.quantization_mode is not None}
        if quantized:
            config["sublayer_dtypes"] = quantized
        return config

    def _post_build(self):
        super()._post_build()
        if not self._sublayer_dtypes:
            return
        sublayers = _named_sublayers(self)
        for path, policy in self._sublayer_dtypes.items():
            # A built sublayer given a quantized policy quantizes itself
            # (Keras' Layer.dtype_policy); `load_own_variables` then fills it.
            sublayers[path].dtype_policy = dtype_policies.deserialize(policy)


def _named_sublayers(layer, prefix: str = "") -> dict:
    """Every sublayer of ``layer`` by its names from ``layer`` down
    (``"self_attention/query"``), the same on every backend."""
    found = {}
    for sublayer in layer._flatten_layers(include_self=False, recursive=False):
        name = prefix + sublayer.name
        found[name] = sublayer
        found.update(_named_sublayers(sublayer, name + "/"))
    return found


def int8_with_scale(kernel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(values, scale)``: ``kernel ≈ values * scale``, ``values`` int8 in
    [-127, 127], one scale per last-axis channel (its largest magnitude /
    127; 1 for a channel of zeros)."""
    largest = np.abs(kernel).max(axis=tuple(range(kernel.ndim - 1)))
    scale = np.where(largest > 0, largest / 127.0, 1.0).astype(np.float32)
    values = np.clip(np.round(kernel / scale), -127, 127).astype(np.int8)
    return values, scale


def _int8(name: str) -> str:
    return f"_{name}_int8"


def _scale(name: str) -> str:
    return f"_{name}_scale"
