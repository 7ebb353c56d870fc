"""The convolutional sentence toolbox: k-max pooling, folding, wide convolution
(public names: `keras_seq.layers`)."""
