"""Multi-replica training: the strategies give the same weights as one device.

Multi-worker runs use two local processes on 127.0.0.1, bounded by timeouts
and killed on failure.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from keras_seq._unused_imports import python_command
from keras_seq.distribute import STRATEGIES, choose_strategy, is_chief, make_strategy

# Trains a tiny PeepholeLSTM regressor for 2 epochs of 2 global batches of 8.
_TRAIN = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tensorflow as tf
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    from keras_seq import layers
    from keras_seq.distribute import is_chief, make_strategy

    if mode == "plain_multi_worker":  # without keras_seq's work-around
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        strategy = make_strategy(mode)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 6, 3)).astype("float32")
    y = rng.normal(size=(16, 4)).astype("float32")
    with strategy.scope():
        keras.utils.set_random_seed(1)
        inputs = keras.Input((6, 3))
        h = layers.PeepholeLSTM(5)(inputs)
        model = keras.Model(inputs, keras.layers.Dense(4)(h))
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).with_options(options)
    model.fit(dataset, epochs=2, verbose=0)
    np.savez(out, replicas=strategy.num_replicas_in_sync, chief=is_chief(),
             *model.get_weights())
    """
)


def _run(mode, out, env=None, timeout=240):
    return subprocess.Popen(
        [*python_command(code=_TRAIN), mode, str(out)],
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _wait(processes, timeout=240):
    try:
        for p in processes:
            output, _ = p.communicate(timeout=timeout)
            assert p.returncode == 0, output.decode()[-3000:]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()


def _weights(path):
    data = np.load(path)
    arrays = [data[f"arr_{i}"] for i in range(len(data.files) - 2)]
    return arrays, int(data["replicas"]), bool(data["chief"])


@pytest.fixture(scope="module")
def single_device_weights(tmp_path_factory):
    """The same script on one device, run in this process: unlike the
    strategies (two logical CPUs, a TF_CONFIG cluster), one device needs no
    fresh process, and this saves starting one."""
    out = tmp_path_factory.mktemp("single") / "w.npz"
    argv = sys.argv
    sys.argv = ["-c", "none", str(out)]
    try:
        exec(compile(_TRAIN, "<single device>", "exec"), {"__name__": "__main__"})
    finally:
        sys.argv = argv
    weights, replicas, _ = _weights(out)
    assert replicas == 1
    return weights


@pytest.mark.slow
def test_mirrored_two_replicas_equal_one_device(single_device_weights, tmp_path):
    _wait([_run("mirrored", tmp_path / "w.npz")])
    weights, replicas, _ = _weights(tmp_path / "w.npz")
    assert replicas == 2
    for got, want in zip(weights, single_device_weights):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_two_local_workers_equal_one_device(single_device_weights, tmp_path, local_workers):
    workers = local_workers(2)
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        processes.append(
            _run("multi_worker", tmp_path / f"w{index}.npz", {"TF_CONFIG": json.dumps(tf_config)})
        )
    _wait(processes)
    chiefs = []
    for index in range(2):
        weights, replicas, chief = _weights(tmp_path / f"w{index}.npz")
        assert replicas == 2
        chiefs.append(chief)
        for got, want in zip(weights, single_device_weights):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert chiefs == [True, False]


@pytest.mark.slow
def test_keras_fit_under_plain_multi_worker_strategy_still_fails(tmp_path, local_workers):
    """Canary for keras-team/keras#20585: when Keras' `fit` works under a plain
    `MultiWorkerMirroredStrategy`, this fails, and the work-around in
    `keras_seq.distribute` (`_MultiWorkerMirroredStrategy.reduce`) can go."""
    workers = local_workers(2)
    processes = []
    try:
        for index in range(2):
            tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            processes.append(_run("plain_multi_worker", tmp_path / f"w{index}.npz",
                                  {"TF_CONFIG": json.dumps(tf_config)}))
        outputs = [p.communicate(timeout=240)[0].decode() for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert any(p.returncode != 0 for p in processes), (
        "Keras' fit now works under a plain MultiWorkerMirroredStrategy "
        "(keras-team/keras#20585 fixed?): drop the work-around in keras_seq.distribute."
    )
    # It fails for the reason the work-around handles: a reduction of a nested
    # per-replica batch or of a scalar along an axis.
    signatures = ("Invalid reduction dimension", "Shapes of all inputs must match",
                  "Attempt to convert a value (PerReplica")
    assert any(sig in out for sig in signatures for out in outputs), outputs[0][-2000:]


def test_unknown_strategy_and_missing_cluster_are_rejected(monkeypatch):
    with pytest.raises(ValueError, match=r"make_strategy: invalid value for argument `name`: "
                       r"expected one of \['auto', 'none', 'mirrored', 'multi_worker'\], "
                       r"received 'tpu'"):
        make_strategy("tpu")
    assert "auto" in STRATEGIES
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="'multi_worker' needs the TF_CONFIG"):
        make_strategy("multi_worker")


def test_chief_is_worker_zero_or_the_chief_task(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert is_chief()
    cluster = {"worker": ["a:1", "b:2"]}
    for index, expected in ((0, True), (1, False)):
        monkeypatch.setenv(
            "TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        )
        assert is_chief() is expected
    with_chief = {"chief": ["c:3"], **cluster}
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": with_chief, "task": {"type": "worker", "index": 0}})
    )
    assert not is_chief()


def test_auto_is_the_default_strategy_without_a_cluster(monkeypatch):
    import tensorflow as tf

    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert choose_strategy() == "none"  # no GPU here
    assert make_strategy("auto") is tf.distribute.get_strategy()


def test_auto_chooses_multi_worker_for_a_cluster_of_two(monkeypatch):
    # Only the choice: creating the strategy would wait for the other worker.
    for tf_config, expected in (
        ({"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
          "task": {"type": "worker", "index": 1}}, "multi_worker"),
        ({"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]},
          "task": {"type": "chief", "index": 0}}, "multi_worker"),
        ({"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}}, "none"),
    ):
        monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
        assert choose_strategy() == expected


@pytest.mark.slow
def test_global_batch_not_divisible_by_the_replicas_is_a_value_error(tmp_path):
    script = textwrap.dedent(
        f"""
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        from keras_seq import training
        try:
            training.train(distribute="mirrored", batch_size=33, out={str(tmp_path)!r}, verbose=0)
        except ValueError as error:
            print(error)
        """
    )
    result = subprocess.run(
        python_command(code=script), capture_output=True, text=True, timeout=240,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert ("TrainingConfig: invalid value for argument `batch_size`: expected a multiple of "
            "the 2 replicas of the 'mirrored' strategy" in result.stdout), result.stdout
    assert "received 33" in result.stdout
    assert list(tmp_path.iterdir()) == []  # checked before any run folder is written
