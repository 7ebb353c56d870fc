"""``MGUCell``, the user's cell of docs/guides/write_your_own_cell.md, taken
from that page's first Python block as a user would paste it, so that the
page cannot drift from what the tests run (and one class is registered)."""

import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "guides" / "write_your_own_cell.md"


def _cell_class():
    code = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[0]
    namespace = {"__name__": "mgu_from_docs"}
    exec(compile(code, str(DOC), "exec"), namespace)
    return namespace["MGUCell"]


MGUCell = _cell_class()
