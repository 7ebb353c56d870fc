"""The recurrent layers of `keras_seq.layers`, for the tests that run over all of them.

One list, imported by the layer tests (``tests/`` is put on ``sys.path`` by
``conftest.py``): a new recurrent layer is added here once.
"""

from keras_seq import layers

# case -> (layer class, cell class, constructor arguments, number of states)
RECURRENT_CASES = {
    "peephole": (layers.PeepholeLSTM, layers.PeepholeLSTMCell, {}, 2),
    "cifg": (layers.CoupledGateLSTM, layers.CoupledGateLSTMCell, {}, 2),
    "cifg_peepholes": (
        layers.CoupledGateLSTM, layers.CoupledGateLSTMCell, {"use_peepholes": True}, 2
    ),
    "gru": (layers.GRU, layers.GRUCell, {}, 1),
    "gru_reset_before": (layers.GRU, layers.GRUCell, {"reset_after": False}, 1),
    "layernorm_lstm": (layers.LayerNormLSTM, layers.LayerNormLSTMCell, {}, 2),
}
RECURRENT_LAYERS = list(dict.fromkeys(case[0] for case in RECURRENT_CASES.values()))
RECURRENT_CELLS = list(dict.fromkeys(case[1] for case in RECURRENT_CASES.values()))
NUM_STATES = {case[0]: case[3] for case in RECURRENT_CASES.values()}


def make_recurrent(case: str, units: int, **kwargs):
    """The layer of ``case`` with ``units`` and its constructor arguments."""
    cls, _, extra, _ = RECURRENT_CASES[case]
    return cls(units, **extra, **kwargs)
