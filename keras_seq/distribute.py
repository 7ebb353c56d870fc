"""`tf.distribute` strategies for training keras-seq models on many devices.

`make_strategy` is the one place that turns a strategy name into a
`tf.distribute.Strategy`; the command line's ``--distribute`` uses it. Build
and compile the model inside ``strategy.scope()`` and call ``fit`` as usual:
Keras splits each global batch across the replicas and averages gradients.

- ``"auto"`` (what ``keras-seq train`` uses unless told otherwise): the
  strategy `choose_strategy` names for this process: ``"multi_worker"`` when
  ``TF_CONFIG`` describes a cluster of more than one task, ``"mirrored"`` when
  there are several local GPUs, ``"none"`` otherwise.
- ``"none"``: the default strategy (one device).
- ``"mirrored"``: synchronous data parallelism over every local GPU; on a
  machine without GPUs, over every logical CPU device (create them with
  `tf.config.set_logical_device_configuration` to test multi-replica code on
  a laptop).
- ``"multi_worker"``: `tf.distribute.MultiWorkerMirroredStrategy`, one process
  per machine (or per local process), the cluster described by the
  ``TF_CONFIG`` environment variable, e.g.
  ``{"cluster": {"worker": ["host0:12345", "host1:12345"]},
  "task": {"type": "worker", "index": 0}}``. Every worker runs the same
  script; worker 0 is the chief and should be the one that writes files.

Batches are global: each replica gets ``batch_size / replicas`` examples
(`keras_seq.training.train` requires a multiple). Its datasets use the auto-shard
policy ``tf.data.experimental.AutoShardPolicy.DATA``: the pipeline reads
tensors held in memory, so there are no files to shard by (``FILE``, and so
``AUTO``, would fall back to ``DATA`` with a warning), and with ``DATA`` each
worker keeps its slice of every global batch, so the global batches, and the
weights, are those of a one-device run, whatever the number of workers
(``OFF`` would have every worker train on the same examples).
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from keras_seq._backend import START_UNDER_TENSORFLOW, require_tensorflow
from keras_seq._validation import ArgumentValueError, invalid_value

__all__ = ["STRATEGIES", "choose_strategy", "is_chief", "make_strategy"]

STRATEGIES = ("auto", "none", "mirrored", "multi_worker")


def choose_strategy() -> str:
    """The strategy name ``"auto"`` stands for in this process.

    ``"multi_worker"`` when ``TF_CONFIG`` lists more than one task (all task
    types together), else ``"mirrored"`` when TensorFlow sees more than one
    GPU, else ``"none"``. Creates no strategy (creating a multi-worker one
    waits for the other workers).

    Examples:
        >>> import os
        >>> "TF_CONFIG" in os.environ or choose_strategy() in ("none", "mirrored")
        True
    """
    tasks = sum(len(addresses) for addresses in _tf_config().get("cluster", {}).values())
    if tasks > 1:
        return "multi_worker"
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return "mirrored"
    return "none"


def make_strategy(name: str = "none") -> tf.distribute.Strategy:
    """Returns the `tf.distribute.Strategy` called ``name`` (see module docstring).

    Args:
        name: ``"auto"`` (`choose_strategy`), ``"none"``, ``"mirrored"`` or
            ``"multi_worker"``.

    Raises:
        ValueError: for an unknown name, or ``"multi_worker"`` without a
            ``TF_CONFIG`` that lists at least one worker.
    """
    require_tensorflow("keras_seq.distribute.make_strategy", START_UNDER_TENSORFLOW)
    if name not in STRATEGIES:
        raise invalid_value("make_strategy", "name", f"one of {list(STRATEGIES)}", name)
    if name == "auto":
        name = choose_strategy()
    if name == "none":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([d.name for d in devices])
    config = _tf_config()
    if not config.get("cluster", {}).get("worker"):
        raise ArgumentValueError(
            "make_strategy", "'multi_worker' needs the TF_CONFIG environment variable to "
            'describe the cluster, e.g. {"cluster": {"worker": ["host0:12345", '
            '"host1:12345"]}, "task": {"type": "worker", "index": 0}}; '
            f"received TF_CONFIG={os.environ.get('TF_CONFIG')!r}."
        )
    return _MultiWorkerMirroredStrategy()


class _MultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """`MultiWorkerMirroredStrategy` whose eager `reduce` works under `fit`.

    Keras 3.15's `fit` asks it for two reductions it cannot do
    (keras-team/keras#20585): a whole nested batch at once, when building the
    model, and a scalar (the loss) along ``axis=0``, after every step. Each
    nested element is reduced on its own, and a scalar with ``axis=None``.
    """

    def reduce(self, reduce_op, value, axis):
        if isinstance(value, (tuple, list, dict)):
            return tf.nest.map_structure(lambda v: self.reduce(reduce_op, v, axis), value)
        if axis is not None and self.experimental_local_results(value)[0].shape.rank == 0:
            axis = None
        return super().reduce(reduce_op, value, axis)


def is_chief() -> bool:
    """True in the process that should write checkpoints, logs and exports.

    That is worker 0 (or the chief task) of a multi-worker cluster, and the only
    process otherwise.
    """
    config = _tf_config()
    task = config.get("task", {})
    task_type, index = task.get("type", "worker"), int(task.get("index", 0))
    if "chief" in config.get("cluster", {}):
        return task_type == "chief"
    return task_type == "worker" and index == 0


def _tf_config() -> dict:
    raw = os.environ.get("TF_CONFIG", "")
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError as error:
        raise ArgumentValueError(
            None, f"TF_CONFIG is not valid JSON ({error}); received {raw!r}.") from None
