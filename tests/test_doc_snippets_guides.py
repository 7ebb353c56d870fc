"""The guides' code blocks run as written: `test_doc_snippets.py`'s harness on
the pages it leaves to this file."""

import pytest
from test_doc_snippets import GUIDES, run_page


@pytest.mark.slow
@pytest.mark.parametrize("page", GUIDES)
def test_guide_code_blocks_run_as_written(page, tmp_path):
    run_page(page, tmp_path)
