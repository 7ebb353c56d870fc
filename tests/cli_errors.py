"""The rule every ``keras-seq`` error line keeps: the command named once, in its words.

`violations(line)` lists what breaks it; tests/conftest.py applies it to every
error line any test makes a command print (`keras_seq.cli.failure_line`), and
tests/test_cli_messages.py to the library's messages one by one.
"""

import re

# The library's functions behind the commands, and those their messages
# used to point to: a user types commands, not these.
PYTHON_NAMES = ("export_run", "translate_texts", "classify_texts", "generate_text", "tag_texts",
                "read_run", "out_dir", "run_dir", "beam_width", "convert_to_onnx",
                "convert_to_tflite", "export_saved_model", "split_labelled", "split_pairs")
_LINE = re.compile(r"^keras-seq (train|tune|translate|classify|tag|generate|export|verify): (.*)$")
_PREFIX = re.compile(r"^(?:keras_seq\.)?[A-Za-z_]\w*(?:\(\))?: ")


def violations(line: str) -> list[str]:
    """What in ``line`` breaks the rule (empty: none)."""
    match = _LINE.match(line)
    if not match:
        return [f"does not start with 'keras-seq <command>: ': {line!r}"]
    command, reason = match.groups()
    found = []
    if _PREFIX.match(reason) and not reason.startswith(("Permission denied", "No such file")):
        found.append(f"a second prefix: {reason.split(':')[0]!r}")
    if f"keras-seq {command}:" in reason:
        found.append("the command named twice")
    found += [f"a Python argument in backticks: {m}" for m in re.findall(r"`[a-z_]\w*`", reason)]
    found += [f"a Python keyword argument: {m}" for m in
              re.findall(r"(?<![\w.-])[a-z_]\w*=(?!=)", reason)]
    found += [f"a Python name: {name}" for name in PYTHON_NAMES
              if re.search(rf"\b{name}\b", reason)]
    return found
