"""Attention, positional encoding and the Transformer blocks (public names: `keras_seq.layers`)."""
