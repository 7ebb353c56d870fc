"""`keras-seq train` resumes after SIGKILL and ends with an uninterrupted run's weights.

Every run is a `python -m keras_seq_command train` process (the console
script's module) in its own process group, killed (the whole group) in
`finally`; progress is read from the backup's ``state.json``, never from the
clock.
"""

import json
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

import keras_seq.models  # noqa: F401  (registers the layers for loading)
from keras_seq import training
from keras_seq.training import backup

# 19 steps an epoch (600 pairs, batches of 32), a backup every 10 steps.
_TINY = ["--train-size", "600", "--validation-size", "20", "--test-size", "20", "--units", "8",
         "--batch-size", "32", "--epochs", "4", "--verbose", "2", "--backup-every-steps", "10",
         "--attention", "none"]
_TIMEOUT = 300


def _command(out, name, *extra):
    return [sys.executable, "-m", "keras_seq_command", "train", "--out", str(out), "--name", name,
            *_TINY, *extra]


def _start(command, log, env=None):
    """Starts ``command`` in its own process group (killed as a whole), output to ``log``."""
    with open(log, "w") as f:
        process = subprocess.Popen(
            command,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", **(env or {})),
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    process.log = log
    return process


def _kill(processes):
    for p in processes:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _finish(processes):
    """Waits for every process; returns their outputs; kills them all on failure."""
    try:
        for p in processes:
            p.wait(timeout=_TIMEOUT)
    finally:
        _kill(processes)
    outputs = [p.log.read_text() for p in processes]
    for p, output in zip(processes, outputs):
        assert p.returncode == 0, output[-3000:]
    return outputs


def _state(run_dir):
    try:
        with open(run_dir / training.BACKUP_DIR / "state.json", encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _kill_when(processes, run_dir, ready):
    """SIGKILLs the first process once the backup's state satisfies ``ready``."""
    deadline = time.monotonic() + _TIMEOUT
    try:
        while True:
            state = _state(run_dir)
            if state is not None and ready(state):
                break
            ended = [p.log.read_text()[-2000:] for p in processes if p.poll() is not None]
            assert not ended, f"a process ended before the kill: {ended}"
            assert time.monotonic() < deadline, "no backup to kill at"
            time.sleep(0.01)
        os.killpg(processes[0].pid, signal.SIGKILL)
        processes[0].wait()
    finally:
        _kill(processes)  # the other workers block in collectives without their peer
    return _state(run_dir)


def _weights(run_dir):
    model = keras.saving.load_model(run_dir / "model.keras", safe_mode=True)
    return model.get_weights()


def _assert_same_weights(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


def _in_epoch_3(state):  # two epochs finished, at least one step backup of the third
    return state["epoch"] == 2 and state["step"] >= 10


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run, started with --fresh over a stale backup of other options.

    It runs beside the first test that uses it; calling the fixture's value
    waits for it and returns ``(run_dir, output)``.
    """
    out = tmp_path_factory.mktemp("runs")
    stale = out / "ref" / training.BACKUP_DIR
    stale.mkdir(parents=True)
    (stale / "state.json").write_text(json.dumps(
        {"epoch": 3, "step": 0, "weights": "ckpt-3-0.weights.h5", "seeds": "ckpt-3-0.seeds.npz",
         "config": {"units": 999}}
    ))
    process = _start(_command(out, "ref", "--fresh"), out / "ref.log")
    done = []

    def wait():
        if not done:
            done.extend(_finish([process]))
        return out / "ref", done[0]

    try:
        yield wait
    finally:
        _kill([process])


@pytest.mark.slow
def test_run_killed_in_epoch_3_resumes_to_the_uninterrupted_weights(reference, tmp_path):
    command = _command(tmp_path, "killed")
    state = _kill_when([_start(command, tmp_path / "1.log")], tmp_path / "killed", _in_epoch_3)
    assert state["epoch"] == 2, state  # killed during epoch 3 of 4
    (output,) = _finish([_start(command, tmp_path / "2.log")])
    assert "Resuming from epoch 3, step 10" in output
    assert "Epoch 1/" not in output and "Epoch 2/" not in output
    assert not (tmp_path / "killed" / training.BACKUP_DIR).exists()
    metrics = json.loads((tmp_path / "killed" / "metrics.json").read_text())
    assert metrics["resumed_from_epoch"] == 3
    _assert_same_weights(_weights(tmp_path / "killed"), _weights(reference()[0]))


@pytest.mark.slow
def test_fresh_discards_the_backup_and_a_finished_run_removes_its_own(reference):
    run_dir, output = reference()
    assert "Resuming" not in output and "Epoch 1/4" in output
    assert not (run_dir / training.BACKUP_DIR).exists()
    assert json.loads((run_dir / "metrics.json").read_text())["resumed_from_epoch"] is None


@pytest.mark.slow
def test_two_workers_killed_and_restarted_end_with_the_one_process_weights(
    reference, tmp_path, local_workers
):
    workers = local_workers(2)
    envs = [
        {"TF_CONFIG": json.dumps({"cluster": {"worker": workers},
                                  "task": {"type": "worker", "index": index}})}
        for index in range(2)
    ]
    command = _command(tmp_path, "mw")
    # Each process's temporary folders in a folder of its own: a killed
    # worker cannot delete its copy of the run; one that ends must.
    temporary = [tmp_path / f"tmp-{attempt}-{i}" for attempt in (1, 2) for i in range(2)]
    for folder in temporary:
        folder.mkdir()
    # Kill the non-chief worker; the chief is then stuck in a collective and killed too.
    processes = [_start(command, tmp_path / f"w{i}.log", dict(env, TMPDIR=str(temporary[i])))
                 for i, env in enumerate(envs)]
    state = _kill_when(processes[::-1], tmp_path / "mw", _in_epoch_3)
    assert state["epoch"] == 2, state
    outputs = _finish(
        [_start(command, tmp_path / f"w{i}-2.log", dict(env, TMPDIR=str(temporary[2 + i])))
         for i, env in enumerate(envs)]
    )
    assert list(temporary[1].glob("keras-seq-worker-*")), "the killed worker's copy"
    assert not list(temporary[3].glob("keras-seq-worker-*")), "a finished worker's copy is left"
    for output in outputs:
        assert "Strategy: multi_worker" in output and "2 replica(s)" in output
        assert "Resuming from epoch 3" in output
        # Each names the run folder the chief wrote, not a deleted copy.
        assert f"Run written to {tmp_path / 'mw'}\n" in output, output[-500:]
    assert not (tmp_path / "mw" / training.BACKUP_DIR).exists()
    _assert_same_weights(_weights(tmp_path / "mw"), _weights(reference()[0]))


def test_a_finished_run_is_not_trained_again_without_fresh(tmp_path):
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "metrics.json").write_text("{}")
    with pytest.raises(FileExistsError, match="already holds a finished run.*fresh=True"):
        training.train(out=str(tmp_path), name="done", verbose=0)


def test_a_backup_of_other_options_is_not_resumed(tmp_path):
    backup = tmp_path / "run" / training.BACKUP_DIR
    backup.mkdir(parents=True)
    (backup / "state.json").write_text(json.dumps({"epoch": 1, "step": 0, "config": {}}))
    with pytest.raises(ValueError, match="written by a run with other options"):
        training.train(out=str(tmp_path), name="run", verbose=0)


def test_backup_restores_weights_optimizer_and_dropout_seeds(tmp_path):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    outputs = keras.layers.Dense(3)(keras.layers.Dropout(0.5)(keras.layers.Dense(4)(inputs)))
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.Adam(0.1), "mse")
    x, y = np.ones((8, 4), "float32"), np.zeros((8, 3), "float32")

    def fit_twice():
        model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
        return [v.numpy() for v in model.variables + model.optimizer.variables]

    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    backup.write_backup(model, str(tmp_path), 1, 0, {})
    want = fit_twice()
    state = backup.read_backup(str(tmp_path))
    assert backup.restore_backup(model, str(tmp_path), state) == (1, 0)
    got = fit_twice()  # the same dropout masks and Adam moments as the first time
    assert len(backup.seed_states(model)) == 1
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_without_a_name_the_newest_unfinished_run_of_the_same_options_resumes(tmp_path):
    config = training.TrainingConfig(out=str(tmp_path)).resolved()
    fingerprint = backup.run_fingerprint(config)
    # What may change on resuming is left out, every other option is kept.
    assert backup.run_fingerprint(training.TrainingConfig(
        out="elsewhere", name="n", verbose=0, fresh=True, distribute="none",
        backup_every_steps=5).resolved()) == fingerprint
    assert fingerprint["seed"] == 0 and fingerprint["units"] == config.units
    assert backup.run_fingerprint(training.TrainingConfig(out=str(tmp_path), seed=1).resolved()
                                  ) == {**fingerprint, "seed": 1}
    for name, options in (("rnn-gru-20260101-000000", fingerprint),
                          ("rnn-gru-20260102-000000", fingerprint),
                          ("rnn-gru-20260103-000000", {**fingerprint, "seed": 1})):
        (tmp_path / name / training.BACKUP_DIR).mkdir(parents=True)
        (tmp_path / name / training.BACKUP_DIR / "state.json").write_text(
            json.dumps({"epoch": 1, "step": 0, "config": options}))
    assert backup.run_name(config, fingerprint) == "rnn-gru-20260102-000000"
    other = training.TrainingConfig(out=str(tmp_path), seed=2).resolved()
    assert backup.run_name(other, {**fingerprint, "seed": 2}).startswith("rnn-gru-2")
    assert not (tmp_path / backup.run_name(other, {**fingerprint, "seed": 2})).exists()
