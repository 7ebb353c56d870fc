"""``python -m keras_seq.cli``: the ``keras-seq`` command."""

import sys

from keras_seq.cli import main

sys.exit(main())
