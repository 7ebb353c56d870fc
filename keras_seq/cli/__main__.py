"""``python -m keras_seq.cli``: the ``keras-seq`` command."""

import gc
import sys

from keras_seq.cli import main

if __name__ == "__main__":
    status = main()
    gc.freeze()  # no collection at exit (keras_seq_command.console says why)
    sys.exit(status)
