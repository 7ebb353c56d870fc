"""Public layers of keras-seq (weight and state layouts: docs/contract.md)."""

# --- recurrent family ---
from keras_seq.layers.coupled_gate_lstm import CoupledGateLSTM, CoupledGateLSTMCell  # noqa: F401
from keras_seq.layers.gru import GRU, GRUCell  # noqa: F401
from keras_seq.layers.ntm import NTM, NTMCell  # noqa: F401
from keras_seq.layers.peephole_lstm import PeepholeLSTM, PeepholeLSTMCell  # noqa: F401

# --- attention, position and Transformer blocks ---
# isort: split
from keras_seq.layers.bahdanau_attention import BahdanauAttention  # noqa: F401
from keras_seq.layers.multi_head_attention import MultiHeadAttention  # noqa: F401
from keras_seq.layers.positionwise_feed_forward import PositionwiseFeedForward  # noqa: F401
from keras_seq.layers.sinusoidal_positional_encoding import (  # noqa: F401
    SinusoidalPositionalEncoding,
)
from keras_seq.layers.transformer_decoder import TransformerDecoder  # noqa: F401
from keras_seq.layers.transformer_encoder import TransformerEncoder  # noqa: F401

# Written out, not built from dir(): importing the classes also binds their
# submodules (`gru`, `transformer_decoder`, ...) here, and those are not API.
__all__ = [
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
