"""`.keras` files saved on PyTorch load, compiled, on every backend.

Keras' PyTorch backend turns `keras.optimizers.Adam` (and the others named
in `TORCH_OPTIMIZER_NAMES`) into a subclass of its own, and a saved model
records that subclass: module ``keras.src.backend.torch.optimizers.torch_adam``,
registered name ``"Adam"``. Loading the file on TensorFlow or JAX then
imports that module, which imports PyTorch (and, where they are installed,
``torch._dynamo`` and Triton: imported after TensorFlow, Triton ends the
process with a segmentation fault), and compiles the model with PyTorch's
optimizer, which cannot update another backend's variables.

Keras looks a registered name up in its custom objects before it imports
a module, so registering each of Keras' own optimizers under the bare name
that the PyTorch backend writes makes the file load with the current
backend's optimizer: same class, same config, same variables. Configs
written on TensorFlow or JAX carry no registered name for these classes
(module ``keras.optimizers``) and are not affected; a class that a user
registered under one of these names keeps that registration.
"""

from __future__ import annotations

import keras

__all__ = ["TORCH_OPTIMIZER_NAMES"]

TORCH_OPTIMIZER_NAMES = (
    "Adadelta", "Adagrad", "Adam", "Adamax", "AdamW", "Lion", "Nadam", "RMSprop", "SGD",
)
"""The `keras.optimizers` classes that Keras' PyTorch backend replaces by a subclass."""



def _register() -> None:
    registry = keras.saving.get_custom_objects()
    for name in TORCH_OPTIMIZER_NAMES:
        registry.setdefault(name, getattr(keras.optimizers, name))


# At import, as Keras' own register_keras_serializable registers a class.
_register()
