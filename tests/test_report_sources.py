"""The generated reports read their prose from docs/prose/ and their targets from
tools/bench/targets.toml: each piece the tools ask for is there and well formed."""

import tomllib

from tools import prose, reliability
from tools.bench import targets


def test_every_reliability_run_says_what_it_does():
    described = prose.sections("reliability-runs")
    assert set(described) == set(reliability.RUNS)
    assert all(described.values())
    for _, names in reliability.SECTIONS:
        assert set(names) <= set(reliability.RUNS)


def test_every_target_is_complete_and_checkable():
    spec = tomllib.loads(targets.TARGETS.read_text())
    assert set(spec) == {"frontend_bound", "paced"}
    for table in spec.values():
        assert table["header"].count("|") == 4
        for t in table["targets"]:
            assert {"against", "metric", "op", "goal", "fmt", "what", "measured",
                    "missed"} <= set(t), t
            assert t["op"] in targets.OPS
            assert t["against"] in ("vllm", "rust", "floor", "ours", "startup")
            assert t["missed"].format(share=0.5)
            assert t["against"] != "floor" or (t["floors"] and t["floor_metric"])


def test_prose_fragments_are_there():
    for name in ("benchmarks-reading", "benchmarks-method", "benchmarks-paced",
                 "reliability-intro", "reliability-found"):
        assert (prose.PROSE / f"{name}.md").read_text().strip(), name
    # spliced into the page as one paragraph: a blank line would end it early
    assert "\n\n" not in (prose.PROSE / "benchmarks-ceiling.md").read_text().strip()
