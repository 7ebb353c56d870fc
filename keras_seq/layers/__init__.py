"""Public layers of keras-seq (see API.md for the contract)."""

# --- recurrent family ---
from keras_seq.layers.coupled_gate_lstm import CoupledGateLSTM, CoupledGateLSTMCell  # noqa: F401
from keras_seq.layers.gru import GRU, GRUCell  # noqa: F401
from keras_seq.layers.peephole_lstm import PeepholeLSTM, PeepholeLSTMCell  # noqa: F401

# --- attention, position and Transformer blocks ---

__all__ = [name for name in dir() if not name.startswith("_")]
