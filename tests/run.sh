#!/usr/bin/env bash
# The whole suite on TensorFlow, and the layer and backend tests on JAX and
# on PyTorch (tests marked tensorflow_only are skipped there). The layers hold
# the backend-specific code; the builders (tests/models) are compositions of
# them, and tests/backends trains, reloads and predicts every builder on each
# backend and checks its outputs against TensorFlow's, so the builders' own
# tests run once, on TensorFlow. Extra arguments go to every pytest run.
#
# The TensorFlow run (two workers) and the JAX-then-PyTorch runs (one worker)
# go side by side: one after the other, each run's last minutes leave a core
# idle while its slowest file finishes. The TensorFlow workers take whole
# files, the longest first (the order tests/conftest.py sets, which xdist
# would otherwise replace by the number of tests per file). TensorFlow's output streams; the
# other two print when they end. The exit status is non-zero if any run fails.
set -uo pipefail
cd "$(dirname "$0")/.."
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
OFF_TF=(tests/layers tests/backends)
QUANTIZE=tests/layers/test_quantize.py
# The step's matmul form, which each process otherwise times once (`auto`,
# under a second): the suite starts hundreds of processes, and its own test
# covers the timing. Both forms are checked against NumPy.
export KERAS_SEQ_STEP_MATMUL="${KERAS_SEQ_STEP_MATMUL:-plain}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# XLA's backend optimisations off, and its CPU fusions emitted the older
# way: the tests compile many tiny programs, and compiling dominates their
# time: a third less without the optimisations, and then, with the older
# emitters, about half of the rest for JAX's layer tests (113 -> 58 s) and
# a fifth for TensorFlow's XLA-compiled ones (17.1 -> 13.8 s; RESULTS.md,
# "The suite, cut").
XLA_TEST_FLAGS="--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"

other_backends() {
  # JAX's compilation cache, kept for this run only, compiles a program that
  # recurs (the same layer and shapes in another test) once: a fifth less.
  # The int8 quantization tests run in a process of their own: in the same
  # process as the rest, JAX 0.10 (with its compilation cache) crashed
  # writing a later test's program to the cache (segmentation fault in
  # compilation_cache.put_executable_and_time), twice in a row.
  XLA_FLAGS="${XLA_FLAGS:-$XLA_TEST_FLAGS}" KERAS_BACKEND=jax \
    JAX_COMPILATION_CACHE_DIR="$work/jax-cache" JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 \
    JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=-1 \
    pytest -q --basetemp="$work/jax" --ignore="$QUANTIZE" "$@" "${OFF_TF[@]}" \
    >"$work/jax.log" 2>&1
  code=$?
  XLA_FLAGS="${XLA_FLAGS:-$XLA_TEST_FLAGS}" KERAS_BACKEND=jax \
    pytest -q --basetemp="$work/jax-quantize" "$@" "$QUANTIZE" >>"$work/jax.log" 2>&1
  quantize_code=$?
  # pytest's "no tests collected" (5) when a selection leaves out that file.
  [ "$quantize_code" = 5 ] && quantize_code=0
  [ "$code" = 0 ] && code=$quantize_code
  echo "$code" >"$work/jax.status"
  KERAS_BACKEND=torch \
    pytest -q --basetemp="$work/torch" "$@" "${OFF_TF[@]}" >"$work/torch.log" 2>&1
  echo $? >"$work/torch.status"
}

other_backends "$@" &
others=$!
# The same XLA flags for TensorFlow, whose recurrent loops are XLA-compiled:
# 8-14% less CPU time for its tests with the first (the programs are tiny
# and compile more than they run).
XLA_FLAGS="${XLA_FLAGS:-$XLA_TEST_FLAGS}" KERAS_BACKEND=tensorflow \
  pytest -q -n 2 --dist loadfile --no-loadscope-reorder --basetemp="$work/tensorflow" "$@"
status=$?
echo "tensorflow: exit status $status"
wait "$others"
for backend in jax torch; do
  echo
  echo "=== KERAS_BACKEND=$backend ==="
  cat "$work/$backend.log"
  code="$(cat "$work/$backend.status" 2>/dev/null || echo 1)"
  echo "$backend: exit status $code"
  [ "$code" = 0 ] || status=1
done
exit "$status"
