"""The TSV reader (`keras_seq.data.pairs`)."""

import pytest

from keras_seq import data


def test_load_tsv_reads_pairs_and_ignores_extra_fields(tmp_path):
    path = tmp_path / "corpus.tsv"
    path.write_bytes(
        "\ufeffGo.\tVa !\tCC-BY 2.0 (France)\r\n\n  \nHi.\tSalut.\n日本\t😀\n".encode()
    )
    assert data.load_tsv(path) == [("Go.", "Va !"), ("Hi.", "Salut."), ("日本", "😀")]
    assert data.load_tsv(path, max_examples=2) == [("Go.", "Va !"), ("Hi.", "Salut.")]
    assert data.load_tsv(str(path), max_examples=0) == []


@pytest.mark.parametrize(
    "bad_line,reason",
    [
        (b"no tab here", "no tab"),
        (b"\tmissing source", "empty source"),
        (b"missing target\t", "empty target"),
        (b"   \tblank source", "empty source"),
        (b"bad\xff bytes\tx", "UTF-8"),
    ],
)
def test_load_tsv_malformed_line_names_file_and_line(tmp_path, bad_line, reason):
    path = tmp_path / "broken.tsv"
    path.write_bytes(b"a\tb\n\nc\td\n" + bad_line + b"\ne\tf\n")
    with pytest.raises(ValueError, match=rf"broken\.tsv, line 4: .*{reason}"):
        data.load_tsv(path)
