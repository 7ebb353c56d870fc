"""keras_seq.layers exports exactly the public layer classes of API.md."""

import types

import keras

from keras_seq import layers

# API.md, "Recurrent layers", "Attention and position" and "Transformer blocks".
# and, of the "Sequence toolbox layers", NTM and NTMCell (add the others here
# and to `__all__` together).
PUBLIC_CLASSES = [
    "BahdanauAttention",
    "CoupledGateLSTM",
    "CoupledGateLSTMCell",
    "GRU",
    "GRUCell",
    "MultiHeadAttention",
    "NTM",
    "NTMCell",
    "PeepholeLSTM",
    "PeepholeLSTMCell",
    "PositionwiseFeedForward",
    "SinusoidalPositionalEncoding",
    "TransformerDecoder",
    "TransformerEncoder",
]


def test_all_lists_exactly_the_public_classes():
    assert sorted(layers.__all__) == PUBLIC_CLASSES
    assert len(set(layers.__all__)) == len(layers.__all__)


def test_all_has_no_submodules():
    assert not [
        name for name in layers.__all__ if isinstance(getattr(layers, name), types.ModuleType)
    ]


def test_every_public_class_is_a_registered_keras_layer():
    for name in layers.__all__:
        cls = getattr(layers, name)
        assert isinstance(cls, type) and issubclass(cls, keras.layers.Layer), name
        assert keras.saving.get_registered_name(cls) == f"keras_seq>{name}"


def test_every_layer_class_in_the_namespace_is_in_all():
    classes = {
        name
        for name, value in vars(layers).items()
        if not name.startswith("_")
        and isinstance(value, type)
        and issubclass(value, keras.layers.Layer)
    }
    assert classes == set(layers.__all__)


def test_star_import_gives_exactly_all():
    namespace = {}
    exec("from keras_seq.layers import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == PUBLIC_CLASSES
