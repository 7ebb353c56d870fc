"""The guides' code blocks run as written: `test_doc_snippets.py`'s harness on
the pages it leaves to this file."""

import pytest
from test_doc_snippets import GUIDES, _TrainedRuns, run_page


@pytest.mark.slow
@pytest.mark.parametrize("page", GUIDES)
def test_guide_code_blocks_run_as_written(page, tmp_path, tmp_path_factory):
    run_page(page, tmp_path, _TrainedRuns(tmp_path_factory))
