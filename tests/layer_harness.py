"""One call that checks what every layer must do (as Keras' and KerasHub's `run_layer_test`).

`run_layer_test(make, inputs, ...)` builds the layer from ``make()`` and
checks, on the backend the tests run on:

- **build and shapes**: the eager output, a functional model's symbolic
  output and ``compute_output_shape`` agree on every output's shape;
- **config**: ``from_config(get_config())`` gives the same config and, with
  the weights copied, the same outputs;
- **serialization**: a functional model holding the layer saves to ``.keras``
  and loads with ``safe_mode=True`` to the same outputs;
- **masks** (with ``mask=``): the layer's output mask is ``expected_mask``;
- **dtype policy** (with ``mixed_precision_atol=``): under
  ``mixed_float16`` the weights stay float32, float outputs are float16 and
  within the tolerance of the float32 layer's with the same weights;
- **fit** (unless ``fit=False``): a model of the layer and a Dense head
  trains one epoch to a finite loss and finite weights that changed.

A layer's own test file then holds only what is particular to it: its
equations against a reference, its arguments, its edge cases.
"""

from __future__ import annotations

import copy

import keras
import numpy as np
from keras import ops


def _flat(outputs) -> list:
    return keras.tree.flatten(outputs)


def _nested_names_dropped(config, top=True):
    """``config`` without the auto-generated names of nested layers (cells)."""
    if isinstance(config, dict):
        return {k: _nested_names_dropped(v, False) for k, v in config.items()
                if top or k != "name"}
    if isinstance(config, (list, tuple)):
        return [_nested_names_dropped(v, False) for v in config]
    return config


def _numpy(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")))


def _functional(make, inputs, call_kwargs):
    symbolic = [keras.Input(batch_shape=(None, *x.shape[1:]), dtype=str(x.dtype)) for x in inputs]
    layer = make()
    return keras.Model(symbolic, layer(*symbolic, **call_kwargs)), layer


def run_layer_test(make, inputs, *, call_kwargs=None, mask=None, expected_mask=None,
                   mixed_precision_atol=None, fit=True, tmp_path=None):
    """Runs the checks of the module docstring on the layer ``make()`` builds.

    Args:
        make: a function of no argument that builds a fresh layer.
        inputs: the list of arrays the layer is called with (positionally).
        call_kwargs: other call arguments (not tensors), e.g. ``return_attention_scores``.
        mask: a ``(B, T)`` bool mask of the first input; ``expected_mask``
            is then the output mask the layer must give for it (None: no mask).
        mixed_precision_atol: compare ``mixed_float16`` with float32 to this tolerance.
        fit: train a model of the layer for one epoch.
        tmp_path: a folder for the ``.keras`` file.
    """
    call_kwargs = dict(call_kwargs or {})
    layer = make()
    eager = _flat(layer(*inputs, **call_kwargs))
    expected = [_numpy(y) for y in eager]

    # Build and shapes: eager, symbolic and compute_output_shape agree.
    model, inner = _functional(make, inputs, call_kwargs)
    inner.set_weights(layer.get_weights())
    symbolic = _flat(model.outputs)
    assert len(symbolic) == len(eager)
    for s, e in zip(symbolic, eager):
        assert tuple(s.shape)[1:] == tuple(e.shape)[1:], (s.shape, e.shape)
    for got, want in zip(_flat(model(inputs)), expected):
        np.testing.assert_allclose(_numpy(got), want, atol=1e-5)

    # Config: the same config back, and the same numbers with the same weights.
    config = layer.get_config()
    clone = type(layer).from_config(copy.deepcopy(config))  # Keras' RNN pops from it
    assert _nested_names_dropped(clone.get_config()) == _nested_names_dropped(config)
    clone(*inputs, **call_kwargs)
    clone.set_weights(layer.get_weights())
    for got, want in zip(_flat(clone(*inputs, **call_kwargs)), expected):
        np.testing.assert_allclose(_numpy(got), want, atol=1e-5)

    # Serialization: a .keras file, loaded in safe mode.
    if tmp_path is not None:
        path = tmp_path / f"{type(layer).__name__}.keras"
        model.save(path)
        loaded = keras.saving.load_model(path, safe_mode=True)
        for got, want in zip(_flat(loaded(inputs)), expected):
            np.testing.assert_allclose(_numpy(got), want, atol=1e-5)

    if mask is not None:
        got_mask = layer.compute_mask(inputs[0], ops.convert_to_tensor(mask))
        got_mask = _flat(got_mask)[0] if isinstance(got_mask, (list, tuple)) else got_mask
        if expected_mask is None:
            assert got_mask is None
        else:
            np.testing.assert_array_equal(ops.convert_to_numpy(got_mask), expected_mask)

    if mixed_precision_atol is not None:
        previous = keras.config.dtype_policy()
        keras.mixed_precision.set_global_policy("mixed_float16")
        try:
            low = make()
            low(*inputs, **call_kwargs)
            low.set_weights(layer.get_weights())
            got = _flat(low(*inputs, **call_kwargs))
        finally:
            keras.mixed_precision.set_global_policy(previous)
        assert all(keras.backend.standardize_dtype(w.dtype) == "float32" for w in low.weights)
        for g, want in zip(got, expected):
            if "float" in keras.backend.standardize_dtype(g.dtype):
                assert keras.backend.standardize_dtype(g.dtype) == "float16"
            g = _numpy(g)
            assert np.all(np.isfinite(g))
            np.testing.assert_allclose(g, want, atol=mixed_precision_atol)

    if fit:
        _check_fit(make, inputs, call_kwargs)


def _check_fit(make, inputs, call_kwargs):
    model, layer = _functional(make, inputs, call_kwargs)
    head = keras.layers.Dense(1)(_flat(model.outputs)[0])
    trained = keras.Model(model.inputs, head)
    trained.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    before = [np.array(w) for w in layer.get_weights()]
    targets = np.ones((len(inputs[0]), *head.shape[1:]), "float32")
    history = trained.fit(inputs, targets, epochs=1, batch_size=len(inputs[0]), verbose=0)
    assert np.isfinite(history.history["loss"][-1])
    if layer.trainable_weights:
        after = layer.get_weights()
        assert all(np.all(np.isfinite(a)) for a in after)
        assert any(not np.array_equal(b, a) for b, a in zip(before, after)), "fit changed nothing"
