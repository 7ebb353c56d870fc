"""The one sequence driver shared by every recurrent layer.

Training uses a TensorArray-based loop (fastest gradients); export switches to a
loop that converts to TFLite builtin ops only (see ``builtin_loop_mode``).
"""

import contextlib
import threading

_state = threading.local()


def builtin_loop_mode_enabled() -> bool:
    """True while tracing for export: loops must use TFLite builtin ops only."""
    return getattr(_state, "builtin_loops", False)


@contextlib.contextmanager
def builtin_loop_mode():
    """Trace recurrent loops in their TFLite-builtin form inside this block."""
    previous = builtin_loop_mode_enabled()
    _state.builtin_loops = True
    try:
        yield
    finally:
        _state.builtin_loops = previous
