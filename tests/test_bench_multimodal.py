"""tools/bench/multimodal.py's pure parts: its arguments, requests, stacks' flags
and report. Engine-free and untimed (the benchmark itself is run by hand)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

from tools.bench import multimodal
from tools.bench.multimodal import ImageChatClient, ImageChatStack


def test_arguments_and_points():
    args = multimodal.parse_args([])
    assert (args.duration, args.concurrency, args.frontends) == (20.0, [16, 64], ["ours", "vllm"])
    assert args.ours_arg == [] and args.baseline_tree is None
    quick = multimodal.parse_args(["--quick", "--mm-processor-workers", "2"])
    assert quick.duration == 5.0
    assert quick.ours_arg == ["--mm-processor-workers", "2"]
    points = multimodal.points(multimodal.parse_args(["--max-tokens", "8"]))
    assert [(w.name, w.concurrency, w.api, w.stream, w.max_tokens) for w in points] == [
        ("image-chat-c16", 16, "chat", True, 8),
        ("image-chat-c64", 64, "chat", True, 8),
    ]


def test_requests_carry_one_of_the_distinct_images():
    from PIL import Image

    images = multimodal.image_data_urls(4)
    assert len(set(images)) == 4
    client = ImageChatClient("h", 1, images, model="m")
    seen = set()
    for _ in range(40):
        head, body = client.build(multimodal.points(multimodal.parse_args([]))[0], 16).split(
            b"\r\n\r\n"
        )
        assert head.startswith(b"POST /v1/chat/completions HTTP/1.1")
        request = json.loads(body)
        assert request["stream"] and request["stream_options"] == {"include_usage": True}
        assert (request["max_tokens"], request["ignore_eos"], request["model"]) == (16, True, "m")
        [message] = request["messages"]
        text, image = message["content"]
        assert text == {"type": "text", "text": multimodal.PROMPT}
        url = image["image_url"]["url"]
        assert url in images
        seen.add(url)
    assert seen == set(images)  # the random picks reach every image
    data = base64.b64decode(images[0].removeprefix("data:image/png;base64,"))
    assert Image.open(io.BytesIO(data)).size == (64, 48)


def test_stacks_turn_the_processor_cache_off_but_for_vllm_cache(tmp_path):
    args = multimodal.parse_args([])
    args.model = Path("/models/vlm")

    def flags(kind: str) -> tuple[list[str], list[str]]:
        stack = ImageChatStack(kind, "real", args, tmp_path, kind)
        return stack._engine_argv(), stack._frontend_argv()[0]

    def no_cache(argv: list[str]) -> bool:
        return " --mm-processor-cache-gb 0" in " " + " ".join(argv)

    for kind in ("ours", "vllm"):
        engine, frontend = flags(kind)
        assert no_cache(engine) and no_cache(frontend)
    engine, frontend = flags("vllm-cache")
    assert not no_cache(engine) and not no_cache(frontend)
    assert frontend[1:3] == ["serve", "/models/vlm"]


def _point(frontend: str, point: str, req_s: float, p99: float, repeat: int = 0) -> dict:
    return {
        "point": point,
        "frontend": frontend,
        "repeat": repeat,
        "req_s": req_s,
        "errors": 0,
        "ttft_ms": {"p50": p99 / 2, "p99": p99},
        "frontend_cpu_share": 0.9,
        "server_cpu_share": 0.5 if frontend == "ours" else 0.0,
        "frontend_cpu_ms_per_req": 12.5,
        "rss_main_mb": 64.0 if frontend == "ours" else 640.0,
        "rss_workers_mb": 620.0 if frontend == "ours" else 0.0,
        "engine_cpu_share": 0.75,
        "core_busy": {"0": 0.95, "1": 1.0},
        "rss_peak_mb": 700.0,
    }


def _results() -> dict:
    return {
        "command": ".venv/bin/python -m tools.bench.multimodal",
        "duration_s": 20.0,
        "max_tokens": 16,
        "images": 8,
        "started": "2026-12-03 12:00:00",
        "loadavg_start": [3.0, 3.0, 3.0],
        "loadavg_end": [4.0, 4.0, 4.0],
        "machine": {"git_commit": "abc1234", "git_dirty": False},
        "points": [
            _point("ours", "image-chat-c16", 40.0, 100.0),
            _point("vllm", "image-chat-c16", 20.0, 400.0),
            _point("ours", "image-chat-c16", 44.0, 90.0, repeat=1),
            _point("vllm", "image-chat-c16", 20.0, 400.0, repeat=1),
            _point("ours", "image-chat-c16", 48.0, 120.0, repeat=2),
            _point("vllm", "image-chat-c16", 20.0, 400.0, repeat=2),
        ],
        "startup": [
            {
                "frontend": "ours",
                "rss_main_mb": 61.0,
                "rss_workers_mb": 612.0,
                "worker_processes": 1,
            },
            {
                "frontend": "ours",
                "rss_main_mb": 63.0,
                "rss_workers_mb": 614.0,
                "worker_processes": 1,
            },
            {
                "frontend": "vllm",
                "rss_main_mb": 636.0,
                "rss_workers_mb": 0.0,
                "worker_processes": 0,
            },
        ],
        "text_only": {
            "rss_idle_mb": 60.6,
            "frontend_processes": 1,
            "baseline_rss_idle_mb": 60.5,
            "recorded_rss_idle_mb": 53.6,
        },
    }


def test_section_is_rendered_and_replaced_in_place(tmp_path):
    md = tmp_path / "benchmarks.md"
    md.write_text(
        "# Benchmarks\n\n## Before\n\nkept\n\n## Multimodal: one-image chat\n\nold\n"
        "\n## After\n\nkept too\n"
    )
    multimodal.write(_results(), tmp_path)
    multimodal.write(_results(), tmp_path)
    text = md.read_text()
    assert text.count(multimodal.SECTION) == 1 and "\nold\n" not in text
    assert text.index("## Before") < text.index(multimodal.SECTION) < text.index("## After")
    assert "kept too" in text
    # medians of the repeats, with their range where they differ
    assert (
        "| image-chat-c16 | ours | 44.0 (40.0–48.0) | 50.0 | 100.0 (90.0–120.0) | 0 | 90% (50%) "
        "| 12.50 | 75% | 95% / 100% | 64 | 620 |" in text
    )
    assert (
        "| image-chat-c16 | vLLM | 20.0 | 200.0 | 400.0 | 0 | 90% (0%) | 12.50 | 75% | "
        "95% / 100% | 640 | 0 |" in text
    )
    assert "* image-chat-c16: ours 2.20x vLLM's requests/s, 0.25x its p99 TTFT." in text
    assert "1 repeat" not in text and "3 repeat(s)" in text
    assert "| ours on the tiny VLM | 62 | 613 | 1 |" in text
    assert "| vLLM on the tiny VLM | 636 | 0 | 0 |" in text
    assert "| ours on the text-only tiny model (mock engine) | 60.6 | - | 0 |" in text
    assert "| the same, code of `--baseline-tree` | 60.5 | - | - |" in text
    assert "| the same, recorded in benchmarks.json | 53.6 | - | - |" in text
    assert json.loads((tmp_path / "benchmarks-multimodal.json").read_text()) == _results()


def test_recorded_text_only_idle_rss_is_ours_on_the_mock(tmp_path):
    path = tmp_path / "benchmarks.json"
    path.write_text(
        json.dumps(
            {
                "startup": [
                    {"frontend": "ours", "engine": "mock", "rss_idle_mb": 53.0},
                    {"frontend": "ours", "engine": "mock", "rss_idle_mb": 55.0},
                    {"frontend": "ours", "engine": "mock", "rss_idle_mb": 54.0},
                    {"frontend": "ours", "engine": "real", "rss_idle_mb": 90.0},
                    {"frontend": "vllm", "engine": "mock", "rss_idle_mb": 615.0},
                ]
            }
        )
    )
    assert multimodal.recorded_text_idle_rss(path) == 54.0
    assert multimodal.recorded_text_idle_rss(tmp_path / "missing.json") is None
