"""hndl.from_module refuses a torch older than the importer is tested with, instead of a wrong graph.

On torch 2.4.1 (nox -s tests_torch24) torch.export kept in-place operations, named layers differently and let an
in-place write into an input through, so the importer would have returned other node names, lost ties and missed
a write it must refuse. It says so as E_IMPORT; everything else in hndl-core works on 2.4.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hndl
from hndl.importer import MIN_TORCH
from hndl.importer import _require_tested_torch as require

RELEASE = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


@pytest.mark.parametrize("version", ["2.4.1", "2.4.1+cu121", "2.12.0", "1.13.1"])
def test_an_older_torch_is_refused_with_the_version_it_needs(version: str) -> None:
    with pytest.raises(hndl.HndlError) as info:
        require(version)
    problem = info.value.problems[0]
    assert problem.code == "E_IMPORT"
    assert f"needs torch {MIN_TORCH[0]}.{MIN_TORCH[1]} or newer (this is torch {version})" in problem.message
    assert problem.hint is not None
    assert "pip install" in problem.hint


@pytest.mark.parametrize("version", ["2.13.0", "2.14.1+cu130", "2.20.0.dev20270101", "3.0.0"])
def test_the_tested_releases_and_newer_are_accepted(version: str) -> None:
    require(version)


@pytest.mark.skipif(RELEASE >= MIN_TORCH, reason="this torch is one the importer is tested with")
def test_from_module_on_this_old_torch_is_e_import_not_a_wrong_graph() -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.from_module(nn.Sequential(nn.Linear(4, 2), nn.ReLU()), torch.randn(3, 4))
    assert info.value.problems[0].code == "E_IMPORT"
    assert torch.__version__ in info.value.problems[0].message
