"""The test workers' scheduler (tests/conftest.py): which modules share a worker."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.conftest import SESSION_GROUP, engine_groups, session_engines_of


def test_modules_sharing_engines_directly_or_through_others_form_one_group():
    groups = engine_groups({
        "a.py": ["real_stack"],
        "b.py": ["real_stack", "vllm_frontend"],
        "c.py": ["vllm_frontend"],
        "d.py": ["vllm_flagged"],
        "e.py": ["embed_servers"],
        "f.py": ["cross_encoder_servers", "embed_servers"],
    })
    assert groups["a.py"] == groups["b.py"] == groups["c.py"]
    assert groups["e.py"] == groups["f.py"]
    assert len({groups["a.py"], groups["d.py"], groups["e.py"]}) == 3
    assert all(group.startswith(SESSION_GROUP) for group in groups.values())


def item(fixturenames: list[str], *marks: pytest.Mark) -> SimpleNamespace:
    return SimpleNamespace(nodeid="t.py::test", fixturenames=fixturenames,
                           iter_markers=lambda name: [m for m in marks if m.name == name])


def test_a_mark_names_the_engines_a_test_gets_by_name():
    mark = pytest.mark.session_engines("real_stack", "vllm_frontend").mark
    assert session_engines_of(item(["request", "embed_servers"], mark)) == {
        "real_stack", "vllm_frontend", "embed_servers"}
    assert session_engines_of(item(["request", "tmp_path"])) == set()
    with pytest.raises(AssertionError, match="not session engine fixtures"):
        session_engines_of(item([], pytest.mark.session_engines("frontend").mark))


def test_the_stack_fixtures_real_target_carries_the_mark():
    from tests.support.stacks import REAL_TARGET

    assert REAL_TARGET.values == ("real",)
    assert [m.args for m in REAL_TARGET.marks if m.name == "session_engines"] == [
        ("real_stack",)]
