"""keras_seq.layers exports exactly the layers its reference page documents (and
the few names of the recurrent protocol), and every layer the contract names."""

import importlib
import os
import re
import types

import keras

from keras_seq import layers

# The public modules above the layers whose classes the contract also names
# (tasks, their preprocessors and samplers, recipes, and the tagger's layers).
OTHER_MODULES = ("keras_seq.tasks", "keras_seq.samplers", "keras_seq.recipes",
                 "keras_seq.models", "keras_seq.tasks.sequence_tagger")

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "docs")

# Class-like names in docs/contract.md that are not layers of ours.
NOT_OUR_LAYERS = {
    "Embedding": "Keras' layer, as the source of a mask",
    "LayerNormalization": "Keras' layer, which the quantizer leaves a negation of in float",
    "SimpleRNN": "Keras' layer behind the builders' cell='simple'",
    "CachedMultiHeadAttention": "KerasHub's layer, whose cache layout ours follows",
    "SinePositionEncoding": "KerasHub's layer, compared with ours",
    "StackedRNNCells": "Keras' stack of cells, which keras_seq.layers.RNN runs",
    "UserWarning": "Python's warning class",
    "Loop": "an ONNX operator",
    "TopK": "an ONNX operator",
    "ReverseBySequence": "an ONNX operator",
    "LSTMSequence": "OpenVINO's operation",
    "RNNNeedFallbackToCPU": "onnxruntime's CUDA provider function",
    "True": "a Python value",
    "None": "a Python value",
    "DecoderSteps": "keras_seq.decoding's protocol of a decoder run one step at a time",
    "Seq2SeqHyperModel": "keras_seq.tuning's search space",
    "TrainingConfig": "keras_seq.training's options of a run",
    "WordPieceTokenizer": "keras_seq.text's tokenizer",
    "Dense": "Keras' layer, the head of classifier_from_language_model",
    "Dropout": "Keras' layer, before that head",
    "LSTMCell": "Keras' cell, whose operator form the exporters know",
    "SimpleRNNCell": "Keras' cell, whose operator form the exporters know",
}
# The public names that are not layers: the recurrent protocol (what a
# user's cell subclasses, returns or calls) and monotonic attention's alignment.
PROTOCOL = {"LoopHints", "ManualGradient", "LSTMForm", "GRUForm", "SimpleRNNForm",
            "linear_recurrence", "register_cell", "monotonic_attention"}


def _read(name):
    with open(os.path.join(DOCS, name), encoding="utf-8") as f:
        return f.read()


def _reference_entries():
    return re.findall(r"^::: keras_seq\.layers\.(\w+)\s*$", _read("reference/layers.md"), re.M)


def _contract_names():
    """The class-like names the contract writes as code: `Name`, `Name(...`,
    `layers.Name`, `models.Name` (not Keras' `keras.layers.Name`), except
    exceptions (`...Error`) and the all-capital names of arguments and
    constants (`OUT`), unless they are layers of ours (`GRU`)."""
    names = re.findall(r"`(?:layers\.|models\.)?([A-Z][A-Za-z0-9]*)[`(]", _read("contract.md"))
    return {
        name for name in names
        if name in layers.__all__ or not (name.isupper() or name.endswith("Error"))
    }


def test_all_is_exactly_the_layers_on_the_reference_page():
    entries = _reference_entries()
    assert len(entries) == len(set(entries)), "a layer is listed twice on reference/layers.md"
    assert sorted(entries) == sorted(layers.__all__)
    assert len(set(layers.__all__)) == len(layers.__all__)


def _public_elsewhere():
    public = set()
    for name in OTHER_MODULES:
        module = importlib.import_module(name)
        public |= {n for n in getattr(module, "__all__", dir(module))
                   if isinstance(getattr(module, n, None), type)}
    return public


def test_every_layer_the_contract_names_is_public():
    names = _contract_names() - _public_elsewhere()
    assert names - set(NOT_OUR_LAYERS) <= set(layers.__all__), sorted(
        names - set(NOT_OUR_LAYERS) - set(layers.__all__))
    # The exceptions above are still named there (a stale entry would hide nothing).
    assert set(NOT_OUR_LAYERS) <= _contract_names(), sorted(set(NOT_OUR_LAYERS) - names)


def test_all_has_no_submodules():
    assert not [
        name for name in layers.__all__ if isinstance(getattr(layers, name), types.ModuleType)
    ]


def test_every_public_class_is_a_registered_keras_layer():
    assert PROTOCOL <= set(layers.__all__)
    for name in sorted(set(layers.__all__) - PROTOCOL):
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
    assert classes == set(layers.__all__) - PROTOCOL


def test_star_import_gives_exactly_all():
    namespace = {}
    exec("from keras_seq.layers import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(layers.__all__)
