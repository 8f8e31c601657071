"""Test-wide settings.

Hypothesis explores new random cases on every local run (that is how it finds bugs), but CI (``CI=true``) uses a
fixed seed so a submission's result does not depend on luck; a failure found locally gets fixed and, where it
teaches something, pinned as a regression test.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
