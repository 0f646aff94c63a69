"""The operators import on their own, first, as an application module does (``--app``
modules of joins import ``worker.operators.joins`` before anything else)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module", ["worker.operators", "worker.operators.joins.stream_stream", "worker.processing"]
)
def test_a_module_imports_first_in_a_fresh_interpreter(module: str) -> None:
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
