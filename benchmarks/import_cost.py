"""What importing TensorFlow costs a process, with and without the packages
`keras_seq._unused_imports` leaves out of the package's own processes.

Each variant is a fresh ``python -c`` that imports TensorFlow (and with it
Keras): all of `UNUSED_AT_IMPORT` importable, all of them left out, and each
one left out alone (what it costs by itself; JAX and scikit-learn share
SciPy, so the singles do not add up to the whole). Variants alternate for
``--repeats`` rounds; the table gives each one's median CPU seconds (user +
system of the child) and the ratio to importing with all of them.

Usage: ``python benchmarks/import_cost.py [--repeats 7]``
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keras_seq._unused_imports import UNUSED_AT_IMPORT  # noqa: E402  (imports TensorFlow here)


def _cpu_seconds(left_out) -> float:
    code = (f"import sys\nsys.modules.update(dict.fromkeys({tuple(left_out)!r}))\n"
            "import tensorflow\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True,
                   env=dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3"))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    variants = {"all importable": (), "all left out": UNUSED_AT_IMPORT,
                **{f"{name} left out": (name,) for name in UNUSED_AT_IMPORT}}
    times = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, left_out in variants.items():
            times[name].append(_cpu_seconds(left_out))
    base = statistics.median(times["all importable"])
    print(f"import tensorflow, {args.repeats} interleaved rounds, median CPU seconds\n")
    print("| variant | CPU s | / all importable |\n|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.2f} | {median / base:.3f} |")


if __name__ == "__main__":
    main()
