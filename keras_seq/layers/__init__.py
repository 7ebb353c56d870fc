"""Public layers of keras-seq (weight and state layouts: docs/contract.md)."""

# --- recurrent family: the protocol, then the cells ---
from keras_seq.layers.recurrent.linear_recurrence import linear_recurrence  # noqa: F401
from keras_seq.layers.recurrent.manual_gradient import ManualGradient  # noqa: F401
from keras_seq.layers.recurrent.operator_forms import GRUForm, LSTMForm, SimpleRNNForm  # noqa: F401
from keras_seq.layers.recurrent.registry import register_cell  # noqa: F401
from keras_seq.layers.recurrent.rnn import RNN, LoopHints, RecurrentCell  # noqa: F401

# isort: split
from keras_seq.layers.recurrent.bidirectional import Bidirectional  # noqa: F401
from keras_seq.layers.recurrent.convertible_rnn import ConvertibleLSTM, ConvertibleSimpleRNN  # noqa: F401
from keras_seq.layers.recurrent.coupled_gate_lstm import CoupledGateLSTM, CoupledGateLSTMCell  # noqa: F401
from keras_seq.layers.recurrent.gru import GRU, GRUCell  # noqa: F401
from keras_seq.layers.recurrent.layernorm_lstm import LayerNormLSTM, LayerNormLSTMCell  # noqa: F401
from keras_seq.layers.recurrent.m_lstm import MLSTM, MLSTMCell  # noqa: F401
from keras_seq.layers.recurrent.min_gru import MinGRU, MinGRUCell  # noqa: F401
from keras_seq.layers.recurrent.min_lstm import MinLSTM, MinLSTMCell  # noqa: F401
from keras_seq.layers.recurrent.ntm import NTM, NTMCell  # noqa: F401
from keras_seq.layers.recurrent.peephole_lstm import PeepholeLSTM, PeepholeLSTMCell  # noqa: F401
from keras_seq.layers.recurrent.recurrent_block import RecurrentBlock  # noqa: F401
from keras_seq.layers.recurrent.rg_lru import RGLRU, RGLRUCell  # noqa: F401
from keras_seq.layers.recurrent.s_lstm import SLSTM, SLSTMCell  # noqa: F401

# --- attention, position and Transformer blocks ---
# isort: split
from keras_seq.layers.attention.bahdanau_attention import BahdanauAttention  # noqa: F401
from keras_seq.layers.attention.luong_attention import LuongAttention  # noqa: F401
from keras_seq.layers.attention.monotonic import (  # noqa: F401
    BahdanauMonotonicAttention,
    LuongMonotonicAttention,
    monotonic_attention,
)
from keras_seq.layers.attention.multi_head_attention import MultiHeadAttention  # noqa: F401
from keras_seq.layers.attention.positionwise_feed_forward import PositionwiseFeedForward  # noqa: F401
from keras_seq.layers.attention.sinusoidal_positional_encoding import (  # noqa: F401
    SinusoidalPositionalEncoding,
)
from keras_seq.layers.attention.transformer_decoder import TransformerDecoder  # noqa: F401
from keras_seq.layers.attention.transformer_encoder import TransformerEncoder  # noqa: F401
from keras_seq.layers.recurrent.attention_wrapper import AttentionWrapper  # noqa: F401

# --- the layers of the model builders (also in keras_seq.models) ---
# isort: split
from keras_seq.layers.padding_mask import PaddingMask  # noqa: F401
from keras_seq.layers.recurrent.recurrent_decoder import RecurrentDecoder  # noqa: F401
from keras_seq.layers.token_embedding import TokenEmbedding  # noqa: F401

# --- sequence toolbox ---
# isort: split
from keras_seq.layers.convolutional.folding import Folding  # noqa: F401
from keras_seq.layers.convolutional.k_max_pooling import DynamicKMaxPooling, KMaxPooling  # noqa: F401
from keras_seq.layers.convolutional.wide_convolution import WideConvolution1D  # noqa: F401
from keras_seq.layers.highway import Highway  # noqa: F401

# --- ELMo ---
# isort: split
from keras_seq.layers.scalar_mix import ScalarMix  # noqa: F401

# Written out, not built from dir(): importing the classes also binds their
# submodules (`gru`, `transformer_decoder`, ...) here, and those are not API.
__all__ = [
    "AttentionWrapper",
    "BahdanauAttention",
    "BahdanauMonotonicAttention",
    "Bidirectional",
    "ConvertibleLSTM",
    "ConvertibleSimpleRNN",
    "CoupledGateLSTM",
    "CoupledGateLSTMCell",
    "DynamicKMaxPooling",
    "Folding",
    "GRU",
    "GRUCell",
    "GRUForm",
    "Highway",
    "KMaxPooling",
    "LSTMForm",
    "LayerNormLSTM",
    "LayerNormLSTMCell",
    "LoopHints",
    "LuongAttention",
    "MLSTM",
    "MLSTMCell",
    "ManualGradient",
    "MinGRU",
    "MinGRUCell",
    "MinLSTM",
    "MinLSTMCell",
    "MultiHeadAttention",
    "NTM",
    "NTMCell",
    "PaddingMask",
    "PeepholeLSTM",
    "PeepholeLSTMCell",
    "PositionwiseFeedForward",
    "RGLRU",
    "RGLRUCell",
    "RNN",
    "RecurrentBlock",
    "RecurrentCell",
    "RecurrentDecoder",
    "SLSTM",
    "SLSTMCell",
    "ScalarMix",
    "SimpleRNNForm",
    "SinusoidalPositionalEncoding",
    "TokenEmbedding",
    "TransformerDecoder",
    "TransformerEncoder",
    "WideConvolution1D",
    "LuongMonotonicAttention",
    "linear_recurrence",
    "monotonic_attention",
    "register_cell",
]
