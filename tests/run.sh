#!/usr/bin/env bash
# The whole suite on TensorFlow, then the layer and backend tests on JAX and
# on PyTorch (tests marked tensorflow_only are skipped there). The layers hold
# the backend-specific code; the builders (tests/models) are compositions of
# them, and tests/backends trains, reloads and predicts every builder on each
# backend and checks its outputs against TensorFlow's, so the builders' own
# tests run once, on TensorFlow. Extra arguments go to every pytest run.
set -euo pipefail
cd "$(dirname "$0")/.."
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
OFF_TF=(tests/layers tests/backends)
KERAS_BACKEND=tensorflow pytest -q -n 2 --dist loadfile "$@"
# XLA's backend optimisations off: the JAX tests compile many tiny programs,
# and compiling dominates their time (a third less without them).
XLA_FLAGS="${XLA_FLAGS:---xla_backend_optimization_level=0}" \
  KERAS_BACKEND=jax pytest -q -n 2 --dist loadfile "$@" "${OFF_TF[@]}"
KERAS_BACKEND=torch pytest -q -n 2 --dist loadfile "$@" "${OFF_TF[@]}"
