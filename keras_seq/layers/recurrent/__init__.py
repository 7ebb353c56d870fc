"""The recurrent family: the cell protocol, the `RNN` layer that runs it, the
loop's backend operations, and one file per cell (public names: `keras_seq.layers`)."""
