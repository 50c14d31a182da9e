"""The product's code (``frontend/``, ``protocol/``, ``engine_core/``) is
linted, formatted and type-checked as pyproject.toml configures it: ruff's
rules and format, mypy."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from harness.procs import REPO_ROOT
from tests.support.requirements import require

PRODUCT = ["frontend", "protocol", "engine_core"]


def run(tool: str, *args: str) -> subprocess.CompletedProcess:
    require(importlib.util.find_spec(tool) is not None,
            f"{tool} is not installed (the test extras: make setup)")
    return subprocess.run([sys.executable, "-m", tool, *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("check", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff(check):
    done = run("ruff", *check, *PRODUCT)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_mypy():
    done = run("mypy", *PRODUCT)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
