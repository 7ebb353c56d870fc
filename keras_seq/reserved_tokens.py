"""The reserved tokens every keras-seq vocabulary starts with, and their ids.

    id 0 "[PAD]"   id 1 "[UNK]"   id 2 "[START]"   id 3 "[END]"

A module without dependencies, so that decoding, export and training code can
use the ids without importing the tokenizers (and tensorflow-text).
`keras_seq.text` re-exports every name.
"""

__all__ = ["END_ID", "PAD_ID", "RESERVED_TOKENS", "START_ID", "UNK_ID"]

PAD_ID = 0
UNK_ID = 1
START_ID = 2
END_ID = 3
# In id order: RESERVED_TOKENS[PAD_ID] == "[PAD]".
RESERVED_TOKENS = ("[PAD]", "[UNK]", "[START]", "[END]")
