"""How the `.keras` files beside this script were made: run once with
KERAS_BACKEND=tensorflow at commit 411d73b, when these builders' layer classes
still lived in `keras_seq.models`. `tests/models/test_saved_models_load.py`
checks that they load after the classes moved to `keras_seq.layers`. Running
it again saves files with today's classes, which would no longer test that.

Usage: python tests/models/data/make_pre_move_models.py tests/models/data
"""

import os
import sys

import keras
import numpy as np

from keras_seq import models

out = sys.argv[1]
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
ids = np.array([[5, 3, 7, 2, 0, 0], [4, 1, 9, 8, 6, 2]], "int32")
built = {
    "rnn_seq2seq_lstm": models.rnn_seq2seq(10, 11, units=4, embedding_dim=3, cell="lstm",
                                           attention="bahdanau", attention_units=3),
    "language_model_simple": models.language_model(10, kind="rnn", num_layers=1, units=4,
                                                   cell="simple"),
    "language_model_transformer": models.language_model(10, kind="transformer", num_layers=1,
                                                        units=4, num_heads=2,
                                                        intermediate_dim=6),
    "dcnn_classifier": models.dcnn_classifier(10, 2, embedding_dim=4, filters=(2, 3),
                                              kernel_sizes=(3, 2)),
}
arrays = {"ids": ids}
for name, model in built.items():
    # Non-default weights, so that a layer that loses its weights shows.
    model.set_weights([rng.normal(0, 0.5, w.shape).astype(w.dtype) for w in model.get_weights()])
    inputs = [ids, ids] if name.startswith("rnn_seq2seq") else ids
    arrays[name] = keras.ops.convert_to_numpy(model(inputs, training=False))
    model.save(os.path.join(out, f"{name}.keras"))
np.savez(os.path.join(out, "pre_move_outputs.npz"), **arrays)
