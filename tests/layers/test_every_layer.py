"""Every public layer through the one-call harness (`layer_harness.run_layer_test`).

Build and shapes, config, ``.keras`` files in safe mode, the output mask,
mixed precision against float32 and one epoch of fit, on every backend; the
layers' own files hold what is particular to each (references of their
equations, arguments, edge cases). A new layer adds one case here.
"""

import keras
import numpy as np
import pytest
from layer_harness import run_layer_test

from keras_seq import layers

B, T, D = 2, 5, 4


def _x(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


SEQUENCE = [_x(B, T, D)]
MASK = np.arange(T)[None, :] < np.array([[T], [3]])
IDS = [np.array([[3, 1, 4, 0, 0], [5, 9, 2, 6, 5]], "int32")]

# name -> (factory, inputs, harness options)
CASES = {
    "PeepholeLSTM": (lambda: layers.PeepholeLSTM(3, return_sequences=True), SEQUENCE,
                     {"mask": MASK, "expected_mask": MASK, "mixed_precision_atol": 2e-2}),
    "CoupledGateLSTM": (lambda: layers.CoupledGateLSTM(3, use_peepholes=True, go_backwards=True),
                        SEQUENCE, {"mask": MASK, "mixed_precision_atol": 2e-2}),
    "GRU": (lambda: layers.GRU(3, return_sequences=True, return_state=True), SEQUENCE,
            {"mask": MASK, "expected_mask": MASK, "mixed_precision_atol": 2e-2}),
    "GRU reset before": (lambda: layers.GRU(3, reset_after=False, zoneout=0.2), SEQUENCE,
                         {"mixed_precision_atol": 2e-2}),
    "LayerNormLSTM": (lambda: layers.LayerNormLSTM(3, norm_epsilon=1e-2, return_sequences=True,
                                                   return_state=True), SEQUENCE,
                      {"mask": MASK, "expected_mask": MASK, "mixed_precision_atol": 3e-2}),
    "NTM": (lambda: layers.NTM(3, memory_size=4, memory_width=2, return_sequences=True),
            SEQUENCE, {"mixed_precision_atol": 3e-2}),
    "ConvertibleLSTM": (lambda: layers.ConvertibleLSTM(3, zoneout=(0.1, 0.2)), SEQUENCE,
                        {"mixed_precision_atol": 2e-2}),
    "ConvertibleSimpleRNN": (lambda: layers.ConvertibleSimpleRNN(3, return_sequences=True),
                             SEQUENCE, {"mixed_precision_atol": 2e-2}),
    "MinGRU": (lambda: layers.MinGRU(3, return_sequences=True, return_state=True), SEQUENCE,
               {"mask": MASK, "expected_mask": MASK, "mixed_precision_atol": 2e-2}),
    "MinLSTM": (lambda: layers.MinLSTM(3, go_backwards=True), SEQUENCE,
                {"mask": MASK, "mixed_precision_atol": 2e-2}),
    "RGLRU": (lambda: layers.RGLRU(D, return_sequences=True), SEQUENCE,
              {"mask": MASK, "expected_mask": MASK, "mixed_precision_atol": 2e-2}),
    "SLSTM": (lambda: layers.SLSTM(4, num_heads=2, return_sequences=True), SEQUENCE,
              {"mask": MASK, "expected_mask": MASK, "mixed_precision_atol": 3e-2}),
    "MLSTM": (lambda: layers.MLSTM(4, num_heads=2, return_state=True), SEQUENCE,
              {"mask": MASK, "mixed_precision_atol": 3e-2}),
    "Bidirectional": (lambda: layers.Bidirectional(layers.GRU(3, return_sequences=True)),
                      SEQUENCE, {"mask": MASK, "expected_mask": MASK,
                                 "mixed_precision_atol": 2e-2}),
    "RNN of cells": (lambda: layers.RNN([layers.PeepholeLSTMCell(3), layers.GRUCell(2)],
                                        return_sequences=True),
                     SEQUENCE, {"mask": MASK, "expected_mask": MASK,
                                "mixed_precision_atol": 3e-2}),
    "RNN of a RecurrentBlock": (lambda: layers.RNN(layers.RecurrentBlock(D, cell="mlstm",
                                                                          num_heads=2),
                                                   return_sequences=True), SEQUENCE,
                                {"mask": MASK, "expected_mask": MASK,
                                 "mixed_precision_atol": 3e-2}),
    "BahdanauAttention": (lambda: layers.BahdanauAttention(3, normalize=True, dropout=0.1),
                          [_x(B, 2, 6), _x(B, T, 5, seed=1)], {"mixed_precision_atol": 1e-2}),
    "LuongAttention": (lambda: layers.LuongAttention(units=6, use_scale=True, dropout=0.1),
                       [_x(B, 2, 6), _x(B, T, 5, seed=1)], {"mixed_precision_atol": 1e-2}),
    # One decoder step: query, memory, the previous step's alignment.
    "BahdanauMonotonicAttention": (
        lambda: layers.BahdanauMonotonicAttention(3, normalize=True, score_bias_init=-1.0),
        [_x(B, 6), _x(B, T, 5, seed=1), np.eye(T, dtype="float32")[[0, 2]]],
        {"mixed_precision_atol": 1e-2}),
    "LuongMonotonicAttention": (
        lambda: layers.LuongMonotonicAttention(units=6, use_scale=True, mode="recursive"),
        [_x(B, 6), _x(B, T, 6, seed=1), np.eye(T, dtype="float32")[[0, 2]]],
        {"mixed_precision_atol": 1e-2}),
    "MultiHeadAttention": (lambda: layers.MultiHeadAttention(num_heads=2, key_dim=4,
                                                             value_dim=3, dropout=0.1),
                           [_x(B, T, 8), _x(B, T, 6, seed=1)],
                           {"call_kwargs": {"use_causal_mask": True},
                            "mixed_precision_atol": 1e-2}),
    "SinusoidalPositionalEncoding": (lambda: layers.SinusoidalPositionalEncoding(
        max_wavelength=100.0), SEQUENCE,
                                     {"mask": MASK, "expected_mask": MASK,
                                      "mixed_precision_atol": 1e-2, "fit": False}),
    "PositionwiseFeedForward": (lambda: layers.PositionwiseFeedForward(6), SEQUENCE,
                                {"mixed_precision_atol": 1e-2}),
    "TransformerEncoder": (lambda: layers.TransformerEncoder(12, 2, activation="gelu",
                                                             normalize_first=True),
                           [_x(B, T, 8)], {"mixed_precision_atol": 2e-2}),
    "TransformerDecoder": (lambda: layers.TransformerDecoder(10, 3, dropout=0.1,
                                                             layer_norm_epsilon=1e-6),
                           [_x(B, 3, 6), _x(B, T, 8, seed=1)], {"mixed_precision_atol": 2e-2}),
    "Highway": (lambda: layers.Highway(), SEQUENCE,
                {"mask": MASK, "expected_mask": MASK, "mixed_precision_atol": 1e-2}),
    "KMaxPooling": (lambda: layers.KMaxPooling(2), SEQUENCE, {"mixed_precision_atol": 1e-2,
                                                              "fit": False}),
    "DynamicKMaxPooling": (lambda: layers.DynamicKMaxPooling(2, 1, 2), SEQUENCE,
                           {"mixed_precision_atol": 1e-2, "fit": False}),
    "Folding": (lambda: layers.Folding(), SEQUENCE,
                {"mask": MASK, "expected_mask": MASK, "mixed_precision_atol": 1e-2,
                 "fit": False}),
    "WideConvolution1D": (lambda: layers.WideConvolution1D(3, 2), SEQUENCE,
                          {"mixed_precision_atol": 1e-2}),
    "TokenEmbedding": (lambda: layers.TokenEmbedding(10, 4), IDS,
                       {"mask": IDS[0] != 0, "expected_mask": IDS[0] != 0,
                        "mixed_precision_atol": 1e-2}),
    "PaddingMask": (lambda: layers.PaddingMask(), IDS, {"fit": False}),
}
# Layers with call signatures of their own, tested in their files: ScalarMix
# (a list of tensors), RecurrentDecoder (an encoder's outputs and states) and
# AttentionWrapper (a cell that reads a memory: test_attention_wrapper.py);
# the cells run in "RNN of cells" or in their layers; RecurrentCell is the protocol.
ELSEWHERE = {"ScalarMix", "RecurrentDecoder", "AttentionWrapper", "RecurrentCell",
             "PeepholeLSTMCell",
             "CoupledGateLSTMCell", "GRUCell", "LayerNormLSTMCell", "NTMCell",
             "MinGRUCell", "MinLSTMCell", "RGLRUCell", "SLSTMCell", "MLSTMCell"}


def test_every_public_layer_has_a_case():
    covered = {name.split()[0] for name in CASES} | {"RecurrentBlock"} | ELSEWHERE
    public = {name for name in layers.__all__ if isinstance(getattr(layers, name), type)
              and issubclass(getattr(layers, name), keras.layers.Layer)}
    assert public <= covered, sorted(public - covered)


@pytest.mark.parametrize("name", list(CASES))
def test_layer_passes_the_harness(name, tmp_path):
    make, inputs, options = CASES[name]
    keras.utils.set_random_seed(0)
    run_layer_test(make, inputs, tmp_path=tmp_path, **options)
