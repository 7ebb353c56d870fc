"""Every model builder, and the decoder layer, on the current Keras backend; see
`every_backend.py`."""

import sys
from pathlib import Path

import keras
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from every_backend import (  # noqa: E402
    BUILDERS,
    check_loads_under_tensorflow,
    check_trains_predicts_and_reloads,
)


@pytest.mark.skipif(keras.backend.backend() == "tensorflow", reason="on TensorFlow, "
                    "tests/layers and tests/models cover training, saving and reloading")
@pytest.mark.parametrize("name", BUILDERS)
def test_builder_trains_predicts_and_reloads_with_equal_outputs(name):
    check_trains_predicts_and_reloads(name)


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() == "tensorflow", reason="moves models from another "
                    "backend to TensorFlow; the TensorFlow run is the receiving end")
def test_builder_saved_on_this_backend_load_under_tensorflow_with_equal_outputs():
    check_loads_under_tensorflow(BUILDERS)
