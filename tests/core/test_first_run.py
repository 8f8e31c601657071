"""The first test run builds its venvs with uv, pointed where pip looks (issue 27: five venvs each unpacking torch
made the README's `nox -s tests lint docs` take 18.5 minutes on 2 cores)."""

from __future__ import annotations

from pathlib import Path

from pip_to_uv import pip_settings, uv_environment

ROOT = Path(__file__).resolve().parents[2]

# What `pip config list` prints on the development machine: the torch CPU wheel is found through find-links.
THIS_MACHINE = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.disable-pip-version-check='1'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
"""


def test_uv_is_told_where_pip_finds_packages() -> None:
    assert uv_environment(THIS_MACHINE) == {
        "UV_FIND_LINKS": "/opt/wheels",
        "UV_EXTRA_INDEX_URL": "file:///opt/pypi/simple file:///opt/pypi-more/simple",
        "UV_CONSTRAINT": "/etc/xdg/pip/constraints.txt",
        "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
        "UV_HTTP_TIMEOUT": "180",
        "UV_INDEX_STRATEGY": "unsafe-best-match",  # pip's choice among several indexes
    }


def test_several_find_links_are_joined_with_commas_and_a_later_scope_wins() -> None:
    listed = "global.find-links='/a /b'\nuser.index-url='https://one'\n:env:.index-url='https://two'\n"
    assert pip_settings(listed) == {"find-links": "/a /b", "index-url": "https://two"}
    assert uv_environment(listed) == {"UV_FIND_LINKS": "/a,/b", "UV_INDEX_URL": "https://two"}


def test_no_pip_configuration_sets_nothing() -> None:
    assert uv_environment("") == {}


def test_nox_and_ci_use_uv_and_the_readme_says_so() -> None:
    noxfile = (ROOT / "noxfile.py").read_text()
    assert 'nox.options.default_venv_backend = "uv|virtualenv"' in noxfile
    assert "graphviz" not in noxfile.split("TEST_DEPS = [")[1].split("]")[0]  # drawing needs only the dot program
    assert '"nox[uv]>=2024.4.15"' in (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert '.venv/bin/pip install "nox[uv]" && .venv/bin/nox -s tests lint docs' in readme
    assert "FIRST_RUN_FIGURES" not in readme
