"""A Neural Turing Machine against an LSTM on the algorithmic tasks of Graves et al. (2014).

    python examples/ntm_copy.py [--out results.json] [--task copy] [--steps N]
        [--models ntm lstm] [--seed 0]

By default: the copy task with sequence lengths 1-20, then bit errors per
sequence at lengths 20, 40 and 80. Writes

    {"ntm": {"bit_errors": {"20": .., "40": .., "80": ..}, "train_seconds": ..,
             "steps": .., "parameters": .., ...},
     "lstm": {...}}

to `--out`, and the NTM's write and read weightings over memory for one
length-40 example (in the style of Graves et al., Fig. 6) to a PNG next to it.
`--task repeat_copy|associative_recall|priority_sort` runs the paper's other
tasks (shorter default budgets, their own test sizes).

The NTM follows Collier & Beel (2018): an LSTM controller of 100 units,
N = 128 locations of width W = 20, one read and one write head, a constant
initial memory, outputs clipped; Adam, gradients clipped to [-10, 10],
batches of 32, but a learning rate of 3e-3 rather than 1e-3: on the copy task
it left the loss plateau of an NTM that has not yet learnt to address its
memory about ten times sooner (benchmarks/RESULTS.md, "Neural Turing
Machine"). Both models train for at most `--steps` batches or
`--max-train-minutes`, and stop early once the moving average of their
training bit errors per sequence falls below `DONE_BIT_ERRORS`. The LSTM
baseline has about as many weights (one LSTM layer and a linear read-out) and
trains the same way.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time
from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf

from keras_seq import data, layers

BITS = 8


@dataclasses.dataclass(frozen=True)
class Task:
    """One task: its training sizes, its test sizes and the defaults of its run."""

    # The task's arguments for training.
    train_sizes: dict
    make: Callable[..., tf.data.Dataset]
    # test name -> the task's arguments for that test.
    tests: dict[str, dict]
    output_bits: int
    steps: int
    # The example whose weightings are drawn.
    figure: dict


TASKS = {
    "copy": Task(
        train_sizes={"min_length": 1, "max_length": 20},
        make=data.copy_task,
        tests={str(n): {"min_length": n, "max_length": n} for n in (20, 40, 80)},
        output_bits=BITS,
        steps=6000,
        figure={"min_length": 40, "max_length": 40},
    ),
    "repeat_copy": Task(
        train_sizes={"min_length": 1, "max_length": 10, "min_repeats": 1, "max_repeats": 10},
        make=data.repeat_copy_task,
        tests={
            "10x10": {"min_length": 10, "max_length": 10, "min_repeats": 10, "max_repeats": 10},
            "20x10": {"min_length": 20, "max_length": 20, "min_repeats": 10, "max_repeats": 10},
            "10x20": {"min_length": 10, "max_length": 10, "min_repeats": 20, "max_repeats": 20},
        },
        output_bits=BITS + 1,
        steps=2500,
        figure={"min_length": 10, "max_length": 10, "min_repeats": 5, "max_repeats": 5},
    ),
    "associative_recall": Task(
        train_sizes={"min_items": 2, "max_items": 6},
        make=data.associative_recall_task,
        tests={str(n): {"min_items": n, "max_items": n} for n in (6, 12)},
        output_bits=BITS,
        steps=2500,
        figure={"min_items": 6, "max_items": 6},
    ),
    "priority_sort": Task(
        train_sizes={"num_inputs": 20, "num_outputs": 16},
        make=data.priority_sort_task,
        tests={"20": {"num_inputs": 20, "num_outputs": 16}},
        output_bits=BITS,
        steps=2500,
        figure={"num_inputs": 20, "num_outputs": 16},
    ),
}

LEARNING_RATE = 3e-3
# Training stops early once the moving average (over about 20 batches) of the
# training bit errors per sequence falls below this: the model has learnt the
# training distribution.
DONE_BIT_ERRORS = 0.02


def build_ntm(task: Task, seed: int = 0) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((None, BITS + 2)),
        layers.NTM(100, memory_size=128, memory_width=20, output_size=task.output_bits,
                   return_sequences=True),
    ], name="ntm")  # fmt: skip


def lstm_units_like(parameters: int, inputs: int, outputs: int) -> int:
    """The LSTM width u whose LSTM and linear read-out have about `parameters` weights.

    4u(inputs + u + 1) + (u + 1)·outputs = parameters, solved for u.
    """
    a, b, c = 4, 4 * (inputs + 1) + outputs, outputs - parameters
    return max(1, round((-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)))


def build_lstm(task: Task, parameters: int, seed: int = 0) -> keras.Model:
    keras.utils.set_random_seed(seed)
    units = lstm_units_like(parameters, BITS + 2, task.output_bits)
    return keras.Sequential([
        keras.Input((None, BITS + 2)),
        keras.layers.LSTM(units, return_sequences=True),
        keras.layers.Dense(task.output_bits),
    ], name="lstm")  # fmt: skip


def masked_loss(targets, logits, weights):
    """Mean sigmoid cross-entropy per bit over the answer steps."""
    per_step = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(targets, logits), -1)
    return tf.reduce_sum(per_step * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)


def make_train_step(model: keras.Model, learning_rate: float, clip: float, batch_size: int):
    optimizer = keras.optimizers.Adam(learning_rate, clipvalue=clip)
    width = model.output_shape[-1]
    signature = [
        tf.TensorSpec((batch_size, None, BITS + 2), tf.float32),
        tf.TensorSpec((batch_size, None, width), tf.float32),
        tf.TensorSpec((batch_size, None), tf.float32),
    ]

    @tf.function(input_signature=signature, jit_compile=False)
    def train_step(inputs, targets, weights):
        with tf.GradientTape() as tape:
            logits = model(inputs, training=True)
            loss = masked_loss(targets, logits, weights)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(gradients, model.trainable_variables)
        return loss, logits

    return train_step


def train(model: keras.Model, task: Task, steps: int, batch_size: int = 32,
          learning_rate: float = LEARNING_RATE, clip: float = 10.0, seed: int = 0,
          log_every: int = 100, max_seconds: float | None = None) -> dict:
    """Trains `model` on `task` for at most `steps` batches (and `max_seconds`).

    Returns a dict with the steps run, the seconds spent (the first step,
    which traces the graph, included) and the per-`log_every` history of
    loss and training bit errors per sequence.
    """
    train_step = make_train_step(model, learning_rate, clip, batch_size)
    batches = iter(task.make(batch_size, seed=seed, **task.train_sizes))
    errors = None  # moving average of the bit errors per sequence
    history, logged = [], []
    start = time.perf_counter()
    step = 0
    for step in range(1, steps + 1):
        inputs, targets, weights = next(batches)
        loss, logits = train_step(inputs, targets, weights)
        batch_errors = data.bit_errors(targets, logits, weights)
        errors = batch_errors if errors is None else 0.95 * errors + 0.05 * batch_errors
        logged.append((float(loss), batch_errors))
        seconds = time.perf_counter() - start
        done = errors < DONE_BIT_ERRORS or (max_seconds is not None and seconds > max_seconds)
        if step % log_every == 0 or step == steps or done:
            mean_loss, mean_errors = np.mean(logged, axis=0)
            history.append({"step": step, "loss": float(mean_loss),
                            "bit_errors": float(mean_errors), "seconds": round(seconds, 1)})
            print(f"{model.name} step {step} loss {mean_loss:.4f} "
                  f"bit errors/seq {mean_errors:.3f} ({seconds:.0f} s)", flush=True)
            logged = []
        if done:
            break
    return {"steps": step, "train_seconds": round(time.perf_counter() - start, 1),
            "history": history}


_PREDICT = {}


def predict(model: keras.Model, inputs) -> np.ndarray:
    """The model's logits, through one traced graph per model (eager loops are slow)."""
    if model not in _PREDICT:
        signature = [tf.TensorSpec((None, None, BITS + 2), tf.float32)]
        _PREDICT[model] = tf.function(lambda x: model(x, training=False),
                                      input_signature=signature)
    return _PREDICT[model](tf.convert_to_tensor(inputs, tf.float32)).numpy()


def evaluate(model: keras.Model, task: Task, batches: int = 8, batch_size: int = 32,
             seed: int = 10_000) -> dict[str, float]:
    """Bit errors per sequence of each of the task's tests, over `batches` batches."""
    results = {}
    for name, sizes in task.tests.items():
        errors = [
            data.bit_errors(targets, predict(model, inputs), weights)
            for inputs, targets, weights in task.make(batch_size, seed=seed, num_batches=batches,
                                                      **sizes)
        ]
        results[name] = float(np.mean(errors))
    return results


def weightings(model: keras.Model, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The read and write weightings `(T, N)` of the first head of each kind, step by step."""
    ntm = model.layers[0]
    cell = ntm.cell
    states = cell.get_initial_state(batch_size=1)
    n, reads = cell.memory_size, cell.num_read_heads
    read, write = [], []
    for t in range(inputs.shape[0]):
        _, states = cell(tf.constant(inputs[None, t]), states)
        w = np.asarray(states[3]).reshape(-1, n)  # (heads, N), read heads first
        read.append(w[0])
        write.append(w[reads])
    return np.array(read), np.array(write)


def _first_after_longest_gap(visited: np.ndarray) -> int:
    """The location after the longest circular run of unvisited locations."""
    n = len(visited)
    if visited.all() or not visited.any():
        return 0
    best, best_end, run = 0, 0, 0
    for i in range(2 * n):  # twice round, for a run that wraps
        run = 0 if visited[i % n] else run + 1
        if run > best:
            best, best_end = run, i % n
    return (best_end + 1) % n


def draw_weightings(model: keras.Model, task: Task, path: str, seed: int = 20_000) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    inputs, targets, _ = next(iter(task.make(1, seed=seed, num_batches=1, **task.figure)))
    inputs = inputs.numpy()[0]
    outputs = 1 / (1 + np.exp(-predict(model, inputs[None])[0]))
    read, write = weightings(model, inputs)
    # Memory is circular: roll it so that the locations the heads visit are
    # contiguous (the longest run of unvisited ones last), with a margin.
    visited = (read.max(0) > 0.05) | (write.max(0) > 0.05)
    shift = _first_after_longest_gap(visited)
    read, write = np.roll(read, -shift, axis=1), np.roll(write, -shift, axis=1)
    used = np.nonzero((read.max(0) > 0.05) | (write.max(0) > 0.05))[0]
    low, high = 0, read.shape[1]
    if used.size:
        low, high = max(0, used.min() - 2), min(read.shape[1], used.max() + 3)
    panels = [
        ("inputs", inputs.T, "channel"),
        ("outputs (sigmoid)", outputs.T, "bit"),
        ("write weighting", write[:, low:high].T, "location"),
        ("read weighting", read[:, low:high].T, "location"),
    ]
    figure, axes = plt.subplots(len(panels), 1, figsize=(8, 9), sharex=True,
                                gridspec_kw={"height_ratios": [1, 1, 3, 3]})
    for axis, (title, image, ylabel) in zip(axes, panels):
        extent = None
        if ylabel == "location":
            extent = (-0.5, image.shape[1] - 0.5, high - 0.5, low - 0.5)
        axis.imshow(image, aspect="auto", cmap="gray_r", interpolation="nearest", extent=extent,
                    vmin=0.0, vmax=1.0)
        axis.set_title(title, fontsize=10)
        axis.set_ylabel(ylabel if ylabel != "location" else "location\n(rolled)")
    axes[-1].set_xlabel("time step")
    figure.suptitle("NTM memory use on one test example")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def run(task_name: str = "copy", steps: int | None = None, models=("ntm", "lstm"),
        seed: int = 0, eval_batches: int = 8, batch_size: int = 32,
        out: str | None = None, figure: bool = True, log_every: int = 100,
        max_train_minutes: float | None = None) -> tuple[dict, dict[str, keras.Model]]:
    """Trains and tests the models; writes the JSON (and the PNG) when `out` is given.

    Returns the results (what the JSON holds) and the trained models by name.
    """
    task = TASKS[task_name]
    steps = task.steps if steps is None else steps
    results, trained_models = {}, {}
    ntm = build_ntm(task, seed)
    for kind in models:
        model = ntm if kind == "ntm" else build_lstm(task, ntm.count_params(), seed)
        trained_models[kind] = model
        trained = train(model, task, steps, batch_size=batch_size, seed=seed,
                        log_every=log_every,
                        max_seconds=None if max_train_minutes is None else 60 * max_train_minutes)
        results[kind] = {
            "bit_errors": evaluate(model, task, eval_batches, batch_size),
            "train_seconds": trained["train_seconds"],
            "steps": trained["steps"],
            "parameters": model.count_params(),
            "history": trained["history"],
        }
        print(kind, json.dumps(results[kind]["bit_errors"]), flush=True)
    if out is not None:
        with open(out, "w") as f:
            json.dump(results, f, indent=2)
        if figure and "ntm" in models:
            draw_weightings(ntm, task, os.path.splitext(out)[0] + "_weightings.png")
    return results, trained_models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="copy")
    parser.add_argument("--out", default=None,
                        help="the JSON file (default ntm_<task>.json); the PNG goes next to it")
    parser.add_argument("--steps", type=int, default=None,
                        help="the most training batches per model (default: per task)")
    parser.add_argument("--models", nargs="+", choices=("ntm", "lstm"), default=["ntm", "lstm"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-train-minutes", type=float, default=10.0,
                        help="stop training a model after this long (default 10)")
    parser.add_argument("--eval-batches", type=int, default=8,
                        help="test batches of 32 per test size")
    args = parser.parse_args()
    out = args.out or f"ntm_{args.task}.json"
    start = time.perf_counter()
    run(args.task, args.steps, tuple(args.models), args.seed, args.eval_batches, out=out,
        max_train_minutes=args.max_train_minutes)
    print(f"wrote {out} ({time.perf_counter() - start:.0f} s in all)")


if __name__ == "__main__":
    main()
