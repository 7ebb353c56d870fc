"""What a line of TensorFlow's start-up or conversion log looks like: the
``keras-seq`` commands must print none (checked on their stderr)."""

import re

TENSORFLOW_LOG = re.compile(r"^[IWE]\d{4} [\d:.]+\s+\d+ \S+:\d+\]|absl::InitializeLog|"
                            r"trackable_obj|oneDNN|cpu_feature_guard", re.M)
