"""Every layer trains under `MirroredStrategy` (2 CPU replicas) to the one-device weights.

One subprocess (logical CPU devices must be configured before TensorFlow
initialises) builds a tiny model around each layer, trains it for 3 SGD steps
on the same global batches of 8 once under the default strategy and once,
from the same initial weights, under `MirroredStrategy` with 2 replicas of 4
examples each, and saves both sets of trained weights. The recurrent layers
train through their hand-written gradient (XLA-compiled loops), the NTM through
autodiff, both here inside each replica's context.

A ``stateful`` layer keeps one state per example row, so each replica needs
its own rows: the mirrored model is built for the per-replica batch (4) (a
model built for the global batch fails in each replica with Keras' "batch size
of the input sequences must be the same" error). Keras creates the state as a
`MirroredVariable` without aggregation; each replica assigns its own component,
so replica r carries the states of its rows (reading the variable outside the
replicas gives replica 0's). The reference is the same layer built for the
global batch (8), whose rows 0-3 and 4-7 are the two replicas' rows. After 3
steps the weights and each replica's carried states must match.
"""

import os
import subprocess
import textwrap

import numpy as np
import pytest

from keras_seq._unused_imports import python_command

_SCRIPT = textwrap.dedent(
    """
    import sys, traceback
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    from keras_seq import layers
    from keras_seq.distribute import make_strategy

    cases, out = sys.argv[1].split(","), sys.argv[2]
    BATCH, STEPS, T, F = 8, 3, 5, 4
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH * STEPS, T, F)).astype("float32")
    # Padded rows (trailing zero steps) for the masked cases.
    lengths = rng.integers(2, T + 1, size=BATCH * STEPS)
    x_padded = x * (np.arange(T)[None, :, None] < lengths[:, None, None])
    context = rng.normal(size=(BATCH * STEPS, T + 1, F)).astype("float32")
    y = rng.normal(size=(BATCH * STEPS, 3)).astype("float32")

    def model_for(case, batch_size=None):
        inputs = keras.Input((T, F), batch_size=batch_size)
        extra = keras.Input((T + 1, F), batch_size=batch_size)
        two_inputs = False
        if case == "PeepholeLSTM":
            h = layers.PeepholeLSTM(6)(inputs)
        elif case == "CoupledGateLSTM":
            h = layers.CoupledGateLSTM(6)(inputs)
        elif case == "GRU":
            h = layers.GRU(6)(inputs)
        elif case == "GRU_masked_sequences":
            masked = keras.layers.Masking()(inputs)
            h = layers.GRU(6, return_sequences=True)(masked)
        elif case == "Bidirectional_PeepholeLSTM_masked":
            masked = keras.layers.Masking()(inputs)
            h = keras.layers.Bidirectional(
                layers.PeepholeLSTM(6, return_sequences=True))(masked)
        elif case == "CoupledGateLSTM_stateful":
            h = layers.CoupledGateLSTM(6, stateful=True)(inputs)
        elif case == "NTM":
            h = layers.NTM(6, memory_size=6, memory_width=3, num_read_heads=2)(inputs)
        elif case == "TransformerEncoder":
            h = layers.TransformerEncoder(intermediate_dim=8, num_heads=2)(inputs)
        elif case == "TransformerDecoder":
            two_inputs = True
            h = layers.TransformerDecoder(intermediate_dim=8, num_heads=2)(
                inputs, encoder_sequence=extra)
        elif case == "BahdanauAttention":
            two_inputs = True
            h = layers.BahdanauAttention(5)(inputs, extra)
        elif case == "MultiHeadAttention":
            two_inputs = True
            h = layers.MultiHeadAttention(num_heads=2, key_dim=3)(inputs, extra)
        else:
            raise ValueError(case)
        if len(h.shape) == 3:
            h = keras.layers.GlobalAveragePooling1D()(h)
        outputs = keras.layers.Dense(3)(h)
        return keras.Model([inputs, extra] if two_inputs else inputs, outputs), two_inputs

    def dataset(case, two_inputs):
        features = x_padded if "masked" in case else x
        features = (features, context) if two_inputs else features
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA)
        return tf.data.Dataset.from_tensor_slices((features, y)).batch(
            BATCH, drop_remainder=True).with_options(options)

    def train(case, strategy, initial, batch_size=None):
        with strategy.scope():
            keras.utils.set_random_seed(0)
            model, two_inputs = model_for(case, batch_size)
            if initial is not None:
                for variable, value in zip(model.trainable_weights, initial):
                    variable.assign(value)
            initial = [v.numpy() for v in model.trainable_weights]
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        model.fit(dataset(case, two_inputs), epochs=1, shuffle=False, verbose=0)
        return model, initial

    def states(model, strategy):
        rnn = [l for l in model.layers if getattr(l, "stateful", False)][0]
        # `.value` is the tf.Variable: under the strategy a MirroredVariable
        # whose per-replica components hold each replica's own rows.
        per_replica = [strategy.experimental_local_results(s.value) for s in rnn.states]
        return [np.concatenate([np.asarray(r) for r in s], axis=0) for s in per_replica]

    results = {}
    mirrored = make_strategy("mirrored")
    assert mirrored.num_replicas_in_sync == 2
    for case in cases:
        try:
            stateful = "stateful" in case
            single, initial = train(case, tf.distribute.get_strategy(), None,
                                    BATCH if stateful else None)
            replicated, _ = train(case, mirrored, initial,
                                  BATCH // 2 if stateful else None)
            want = [v.numpy() for v in single.trainable_weights]
            got = [v.numpy() for v in replicated.trainable_weights]
            for i, (g, w) in enumerate(zip(got, want)):
                results[f"{case}/weight/{i}/single"] = w
                results[f"{case}/weight/{i}/mirrored"] = g
            for i, w in enumerate(initial):
                results[f"{case}/weight/{i}/initial"] = w
            if stateful:
                for i, (g, w) in enumerate(zip(states(replicated, mirrored),
                                               states(single, tf.distribute.get_strategy()))):
                    results[f"{case}/state/{i}/single"] = w
                    results[f"{case}/state/{i}/mirrored"] = g
        except Exception:
            results[f"{case}/error"] = np.array(traceback.format_exc())
    np.savez(out, **results)
    """
)

CASES = (
    "PeepholeLSTM",
    "CoupledGateLSTM",
    "GRU",
    "GRU_masked_sequences",
    "Bidirectional_PeepholeLSTM_masked",
    "CoupledGateLSTM_stateful",
    "NTM",
    "TransformerEncoder",
    "TransformerDecoder",
    "BahdanauAttention",
    "MultiHeadAttention",
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("mirrored") / "weights.npz"
    result = subprocess.run(
        [*python_command(code=_SCRIPT), ",".join(CASES), str(out)],
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with np.load(out) as data:
        return {key: data[key] for key in data.files}


def _pairs(trained, case, kind):
    keys = sorted(k for k in trained if k.startswith(f"{case}/{kind}/") and k.endswith("/single"))
    return [(k, trained[k], trained[k.replace("/single", "/mirrored")]) for k in keys]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_mirrored_two_replicas_train_to_the_one_device_weights(trained, case):
    assert f"{case}/error" not in trained, str(trained.get(f"{case}/error"))
    pairs = _pairs(trained, case, "weight")
    assert pairs
    moved = 0.0
    for key, want, got in pairs:
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5, err_msg=key)
        initial = trained[key.replace("/single", "/initial")]
        moved = max(moved, float(np.max(np.abs(want - initial))))
    assert moved > 1e-3  # the steps changed the weights, so equality means something
    if "stateful" in case:
        states = _pairs(trained, case, "state")
        assert states
        for key, want, got in states:
            assert np.max(np.abs(want)) > 0  # the state was carried
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5, err_msg=key)
