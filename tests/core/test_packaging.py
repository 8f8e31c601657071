"""The install set under test is the one nox says it is: hndl.func / hndl.docs present exactly when installed."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

import hndl

# What these check is decided by the install itself (which distributions, which install mode).
pytestmark = pytest.mark.every_install_set

EXPECTED = {
    "core": {"hndl.func": False, "hndl.docs": False},
    "core+func": {"hndl.func": True, "hndl.docs": False},
    "all": {"hndl.func": True, "hndl.docs": True},
}


@pytest.mark.skipif("HNDL_INSTALL_SET" not in os.environ, reason="only meaningful inside a nox install set")
@pytest.mark.parametrize("module", ["hndl.func", "hndl.docs"])
def test_subpackages_match_the_install_set(module):
    expected = EXPECTED[os.environ["HNDL_INSTALL_SET"]][module]
    assert (importlib.util.find_spec(module) is not None) is expected


@pytest.mark.skipif(os.environ.get("HNDL_INSTALL_SET") != "core", reason="needs hndl-func and hndl-docs absent")
def test_an_absent_subpackage_is_an_attribute_error_naming_its_distribution():
    assert not hasattr(hndl, "func")
    with pytest.raises(AttributeError, match="install the hndl-docs distribution"):
        hndl.docs  # noqa: B018


def test_the_public_api_is_what_design_fixes():
    for name in ("Graph", "build", "load", "dumps", "HndlError", "op", "Param", "Port", "registry", "check"):
        assert hasattr(hndl, name), name
    assert hndl.torch.GraphModule is hndl.GraphModule


def test_an_unknown_attribute_is_a_plain_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        hndl.nope  # noqa: B018


def test_hndl_torch_is_imported_lazily():
    code = "import sys, hndl; assert 'hndl.torch' not in sys.modules; hndl.torch.GraphModule; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "ok", out.stderr
