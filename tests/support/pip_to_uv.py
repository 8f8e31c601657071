"""Where pip looks for packages, said to uv: the noxfile's uv venvs must find what pip finds.

uv reads none of pip's configuration. On a machine whose torch wheel is found only through pip's ``find-links``
(``/etc/pip.conf``, ``PIP_FIND_LINKS``), a uv venv would resolve torch from PyPI instead. :func:`uv_environment`
turns the output of ``pip config list`` into the ``UV_*`` variables that say the same.
"""

from __future__ import annotations

#: pip setting -> (uv's variable, how uv separates several values).
AS_UV = {
    "find-links": ("UV_FIND_LINKS", ","),  # uv separates these with commas, pip with whitespace
    "extra-index-url": ("UV_EXTRA_INDEX_URL", " "),
    "index-url": ("UV_INDEX_URL", " "),
    "constraint": ("UV_CONSTRAINT", " "),
    "cert": ("SSL_CERT_FILE", " "),
    "default-timeout": ("UV_HTTP_TIMEOUT", " "),
    "timeout": ("UV_HTTP_TIMEOUT", " "),
}
#: pip's configuration scopes, later ones winning (``pip config list`` prints ``scope.name='value'``).
SCOPES = {"global": 0, "user": 1, "site": 2, ":env:": 3}


def pip_settings(listed: str) -> dict[str, str]:
    """``pip config list`` output as ``{"find-links": "/opt/wheels", ...}``, the later scope winning."""
    found: dict[str, tuple[int, str]] = {}
    for line in listed.splitlines():
        key, sep, value = line.partition("=")
        scope, dot, name = key.rpartition(".")
        if not sep or not dot:
            continue
        level = SCOPES.get(scope, 0)
        if name not in found or found[name][0] <= level:
            found[name] = (level, value.strip().strip("'\""))
    return {name: value for name, (_, value) in found.items()}


def uv_environment(listed: str) -> dict[str, str]:
    """The ``UV_*`` (and ``SSL_CERT_FILE``) variables that make uv look where pip, configured as ``listed``
    says, looks."""
    settings = pip_settings(listed)
    out: dict[str, str] = {}
    for name, (variable, separator) in AS_UV.items():
        if settings.get(name) and variable not in out:
            out[variable] = separator.join(settings[name].split())
    if "UV_EXTRA_INDEX_URL" in out:
        # pip takes the best version a package has on any of its indexes; uv by default only looks at the first
        # index that has the package at all, which may be a local mirror lacking the version wanted.
        out["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return out
