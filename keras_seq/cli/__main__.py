"""``python -m keras_seq.cli``: the ``keras-seq`` command."""

import sys

from keras_seq.cli import main

if __name__ == "__main__":
    sys.exit(main())
