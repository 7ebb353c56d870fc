"""What ``pip install`` gets: the license and the extras."""

import hashlib
import os

import pytest
from packaging.requirements import Requirement  # installed with pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# SHA-256 of the Apache License 2.0 as published (apache.org/licenses/LICENSE-2.0.txt).
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def _project():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def test_license_file_is_the_apache_2_text_the_metadata_names():
    with open(os.path.join(ROOT, "LICENSE"), "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == APACHE_2_SHA256
    assert _project()["license"] == {"text": "Apache-2.0"}


def test_torch_extra_accepts_a_cpu_build_installed_first_and_dev_pins_cis():
    extras = _project()["optional-dependencies"]
    (torch,) = [Requirement(r) for r in extras["torch"]]
    # PyTorch's CPU wheels carry a +cpu local version: the extra must not
    # make pip replace one with PyPI's CUDA build.
    for version in ("2.13.0+cpu", "2.9.1+cpu", "2.13.0"):
        assert torch.specifier.contains(version), version
    (dev_torch,) = [Requirement(r) for r in extras["dev"] if Requirement(r).name == "torch"]
    assert [s.operator for s in dev_torch.specifier] == ["=="]
    assert dev_torch.specifier.contains("2.13.0+cpu")
    assert [Requirement(r).name for r in extras["jax"]] == ["jax"]
    assert Requirement(extras["jax"][0]).extras == {"cpu"}


def test_the_longest_test_files_named_for_scheduling_exist():
    from conftest import LONGEST_FILES

    tests = os.path.join(ROOT, "tests")
    assert [name for name in LONGEST_FILES if not os.path.isfile(os.path.join(tests, name))] == []
    with open(os.path.join(tests, "run.sh"), encoding="utf-8") as f:
        assert "--no-loadscope-reorder" in f.read()  # else xdist orders files by test count
