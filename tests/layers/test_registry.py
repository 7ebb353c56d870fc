"""The one registry of cell names (`keras_seq.layers.recurrent.registry`) and the
one way a layer builds its cell (`gated_cell.cell_and_rnn_arguments`).

Every registered name builds a layer (or a `RecurrentBlock`) with the states
its cell declares; a user's cell registered once reaches the builders,
`TrainingConfig`, the command line, the tuner and `train`.

Names and classes, the same on every backend: this runs on TensorFlow only
(the layers it builds are tested on every backend in their own files).
"""

import keras
import numpy as np
import pytest
from keras import ops
from recurrent_family import RECURRENT_LAYERS

from keras_seq import layers, models, run_config
from keras_seq.layers.recurrent import registry
from keras_seq.layers.recurrent.gated_cell import GatedRNN
from keras_seq.layers.recurrent.kernel_cell import KernelRNN
from keras_seq.model_kinds import BLOCK_MODELS, LANGUAGE_MODEL_KINDS

pytestmark = pytest.mark.tensorflow_only

B, T, IN, U = 2, 4, 3, 4

# The contract's states of the built-in names (docs/contract.md).
BUILT_IN_STATES = {"gru": 1, "lstm": 2, "peephole": 2, "coupled": 2, "simple": 1,
                   "layernorm_lstm": 2, "mingru": 1, "minlstm": 1}
BLOCK_CELL_STATES = {"mingru": 1, "minlstm": 1, "rglru": 1, "mlstm": 3, "slstm": 4}


@keras.saving.register_keras_serializable(package="test_registry")
class JANETCell(layers.RecurrentCell):
    """JANET (van der Westhuizen & Lasenby 2018), an LSTM with a forget gate only:
    f = σ(W_f x + U_f h + b_f), c = f ⊙ c + (1 − f) ⊙ tanh(W_c x + U_c h + b_c),
    h = c; states (h, c), so the registry counts it in the LSTM family."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = [units, units]

    def build(self, input_shape):
        u = self.units
        self.kernel = self.add_weight(shape=(input_shape[-1], 2 * u), name="kernel")
        self.recurrent_kernel = self.add_weight(shape=(u, 2 * u), name="recurrent_kernel",
                                                initializer="orthogonal")
        self.bias = self.add_weight(shape=(2 * u,), name="bias", initializer="zeros")

    def project(self, sequence):
        return ops.matmul(sequence, self.kernel) + self.bias

    def step(self, inputs, states, training=False):
        h, c = states
        z_f, z_c = ops.split(inputs + ops.matmul(h, self.recurrent_kernel), 2, axis=-1)
        f = ops.sigmoid(z_f)
        c = f * c + (1.0 - f) * ops.tanh(z_c)
        return c, [c, c]

    def get_config(self):
        return {**super().get_config(), "units": self.units}


@pytest.fixture
def janet(monkeypatch):
    """``register_cell("janet", JANETCell)`` for one test; afterwards the
    registry is as it was."""
    monkeypatch.setattr(registry, "_CELLS", dict(registry._CELLS))
    models.register_cell("janet", JANETCell)
    yield "janet"
    registry.num_states.cache_clear()


def _x(rng, features=IN):
    return rng.normal(size=(B, T, features)).astype("float32")


@pytest.mark.parametrize("cell", registry.cell_names())
def test_every_cell_name_builds_a_layer_with_the_states_of_its_cell(cell, rng):
    layer = registry.recurrent_layer(cell, U, return_sequences=True, return_state=True)
    output, *states = layer(_x(rng))
    assert tuple(output.shape) == (B, T, U)
    assert len(states) == registry.num_states(cell)
    if cell in BUILT_IN_STATES:
        assert len(states) == BUILT_IN_STATES[cell]
        assert registry.is_lstm_family(cell) == (BUILT_IN_STATES[cell] == 2)


def test_the_built_in_names_are_registered_in_their_order():
    assert registry.cell_names()[: len(BUILT_IN_STATES)] == tuple(BUILT_IN_STATES)
    assert registry.block_cell_names() == tuple(BLOCK_CELL_STATES)


@pytest.mark.parametrize("cell", registry.block_cell_names())
def test_every_block_cell_builds_a_block_with_the_states_of_its_cell(cell, rng):
    block = layers.RecurrentBlock(U, cell=cell, num_heads=2)
    output, *states = layers.RNN(block, return_sequences=True, return_state=True)(_x(rng, U))
    assert tuple(output.shape) == (B, T, U)
    # The convolution's inputs, then the cell's states.
    assert len(states) == 1 + BLOCK_CELL_STATES[cell]
    assert registry.takes_num_heads(cell) == (cell in ("mlstm", "slstm"))


def test_block_models_name_the_registrys_block_cells_and_every_reader_has_them():
    for cells in BLOCK_MODELS.values():
        assert set(cells) <= set(registry.block_cell_names())
    assert LANGUAGE_MODEL_KINDS == ("transformer", "rnn", *BLOCK_MODELS)
    assert run_config.BLOCK_MODELS == tuple(BLOCK_MODELS)
    assert set(run_config.MODELS) == set(run_config.LM_DEFAULTS) == set(LANGUAGE_MODEL_KINDS)


@pytest.mark.parametrize("kind", list(BLOCK_MODELS))
def test_every_block_model_holds_its_cells_in_turn(kind):
    model = models.language_model(11, kind=kind, num_layers=3, units=U, num_heads=2,
                                  intermediate_dim=8)
    cells = BLOCK_MODELS[kind]
    held = [model.get_layer(f"recurrent_{i}").cell.cell_name for i in range(3)]
    assert held == [cells[i % len(cells)] for i in range(3)]
    assert model(np.ones((B, T), "int32")).shape == (B, T, 11)


def test_the_shared_layer_list_holds_every_gated_layer_of_the_registry():
    for cell in registry.cell_names():
        cls = type(registry.recurrent_layer(cell, U))
        if issubclass(cls, GatedRNN) and not issubclass(cls, KernelRNN):
            assert cls in RECURRENT_LAYERS, cell


@pytest.mark.parametrize("make", [
    lambda **kw: layers.PeepholeLSTM(U, use_bias=False, **kw),
    lambda **kw: layers.GRU(U, reset_after=False, **kw),
    lambda **kw: layers.NTM(U, memory_size=4, memory_width=2, **kw),
    lambda **kw: layers.MinLSTM(U, bias_initializer="ones", **kw),
    lambda **kw: layers.MLSTM(U, num_heads=2, **kw),
    lambda **kw: registry.recurrent_layer("janet", U, **kw),
], ids=["PeepholeLSTM", "GRU", "NTM", "MinLSTM", "MLSTM", "a cell registered alone"])
def test_every_layer_splits_its_arguments_between_its_rnn_and_its_cell(make, janet):
    layer = make(return_sequences=True, go_backwards=True, zero_output_for_mask=True,
                 dtype="mixed_float16", trainable=False, name="layer")
    assert (layer.return_sequences, layer.go_backwards, layer.zero_output_for_mask) == (
        True, True, True)
    assert layer.name == "layer" and not layer.trainable
    # The cell computes in the layer's policy, trains when the layer does,
    # and has a name that does not depend on how many cells came before.
    cell = layer.cell
    assert cell.dtype_policy.name == "mixed_float16" and not cell.trainable
    assert cell.name == {"PeepholeLSTMCell": "peephole_lstm_cell", "GRUCell": "gru_cell",
                         "NTMCell": "ntm_cell", "MinLSTMCell": "min_lstm_cell",
                         "MLSTMCell": "mlstm_cell", "JANETCell": "janet_cell"}[
        type(cell).__name__]


def test_an_argument_of_neither_the_rnn_nor_the_cell_is_an_error():
    with pytest.raises((TypeError, ValueError), match="no_such_argument"):
        layers.GRU(U, no_such_argument=1)
    with pytest.raises((TypeError, ValueError), match="no_such_argument"):
        layers.MinGRU(U, no_such_argument=1)


def test_a_registered_user_cell_reaches_every_reader_of_the_registry(janet, rng, capsys):
    from keras_seq.cli.parser import build_parser

    assert janet in registry.cell_names() and janet in run_config.CELLS
    assert registry.num_states(janet) == 2 and registry.is_lstm_family(janet)
    # TrainingConfig: a valid cell, with the LSTM family's defaults (two states).
    config = run_config.TrainingConfig(cell=janet).resolved()
    assert (config.cell, config.epochs) == (janet, run_config.LSTM_FAMILY_DEFAULTS["epochs"])
    # keras-seq train --cell: accepted, and listed when a name is not.
    from keras_seq.cli import main

    parser, _ = build_parser()
    assert parser.parse_args(["train", "--cell", janet]).cell == janet
    with pytest.raises(SystemExit):
        main(["train", "--cell", "no_such_cell"])
    assert f", {janet}; a cell of your own" in capsys.readouterr().err
    # The builders.
    ids = np.array([[3, 4, 5, 0], [6, 7, 8, 9]], "int32")
    built = {
        "rnn_seq2seq": (models.rnn_seq2seq(10, 10, units=U, embedding_dim=3, cell=janet),
                        {"encoder_inputs": ids, "decoder_inputs": ids}),
        "language_model": (models.language_model(10, kind="rnn", num_layers=1, units=U,
                                                 cell=janet), ids),
        "sequence_classifier": (models.sequence_classifier(10, 2, units=U, cell=janet), ids),
        "bidirectional_language_model": (models.bidirectional_language_model(
            10, num_layers=1, units=U, cell=janet), ids),
    }
    for name, (model, inputs) in built.items():
        cells = [layer.cell for layer in model._flatten_layers()
                 if isinstance(layer, keras.layers.RNN)]
        cells += [layer.cell for layer in model._flatten_layers()
                  if isinstance(layer, models.RecurrentDecoder)]
        assert any(isinstance(cell, JANETCell) for cell in cells), name
        for output in keras.tree.flatten(model(inputs)):
            assert np.all(np.isfinite(ops.convert_to_numpy(output))), name


@pytest.mark.tensorflow_only
def test_a_registered_user_cell_is_searched_by_default(janet):
    from keras_seq.tuning import ClassifierHyperModel, Seq2SeqHyperModel

    assert janet in Seq2SeqHyperModel(5, 5).cells
    assert janet in ClassifierHyperModel(5, 2).cells
