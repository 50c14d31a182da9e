"""Every ``vllm serve`` flag works with ``frontend``: derived from vLLM's own parser.

vLLM's parser runs in a subprocess (tests/support/vllm_flag_probe.py) and
lists its flags with a command line it accepts for each option string
(``--no-`` forms and short aliases included). Each of those must be accepted
by ``frontend`` and come out with the value vLLM parsed: on the frontend's
own argument for the flags it implements (listed in FRONTEND_FLAGS), or
among the recorded flags for all the others. The frontend's copy of vLLM's
flag table must equal the one generated from the installed vLLM, so a flag
added by a later vLLM fails here until the table is regenerated
(``python -m tools.gen_vllm_flags``) and the flag is classified.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from frontend.cli import build_parser, parse_args
from frontend.ops import vllm_flags
from harness.procs import REPO_ROOT
from tests.support.requirements import require_vllm

BIN_DIR = Path(sys.executable).parent

# vLLM's flags the frontend acts on (its own argument of the same dest).
FRONTEND_FLAGS = {
    # vLLM API-server flags
    "allow_credentials",
    "allowed_headers",
    "allowed_methods",
    "allowed_origins",
    "api_key",
    "api_server_count",
    "chat_template",
    "enable_auto_tool_choice",
    "enable_force_include_usage",
    "enable_request_id_headers",
    "host",
    "lora_modules",
    "port",
    "ssl_ca_certs",
    "ssl_cert_reqs",
    "ssl_certfile",
    "ssl_ciphers",
    "ssl_keyfile",
    "tool_call_parser",
    "tool_parser_plugin",
    "tool_strict_level",
    "uds",
    "enable_server_load_tracking",
    "enable_tokenizer_info_endpoint",
    "disable_fastapi_docs",
    "default_chat_template_kwargs",
    "chat_template_content_format",
    "trust_request_chat_template",
    "trust_request_mm_kwargs",
    "response_role",
    "return_tokens_as_token_ids",
    "enable_prompt_tokens_details",
    "exclude_tools_when_tool_choice_none",
    "sse_keep_alive_interval",
    "max_log_len",
    "enable_log_outputs",
    "enable_log_deltas",
    "disable_uvicorn_access_log",
    "disable_access_log_for_endpoints",
    "log_error_stack",
    "enable_log_requests",
    "root_path",
    "anthropic_disabled_thinking_effort",
    # engine-args flags that vLLM's API server reads too
    "model",
    "tokenizer",
    "tokenizer_mode",
    "trust_remote_code",
    "revision",
    "tokenizer_revision",
    "download_dir",
    "hf_token",
    "generation_config",
    "override_generation_config",
    "served_model_name",
    "max_logprobs",
    "enable_lora",
    "reasoning_parser",
    "reasoning_parser_plugin",
    "structured_outputs_config",
    "data_parallel_size",
    "data_parallel_address",
    "data_parallel_rpc_port",
    "disable_log_stats",
    "kv_cache_metrics",
    "custom_histogram_buckets",
    "otlp_traces_endpoint",
    "log_level",
    "shutdown_timeout",
}
# Frontend flags whose parsed value is not vLLM's on purpose: vLLM builds
# objects (LoRA module paths, a config dataclass) where the frontend keeps the
# text it validates itself at start.
OWN_REPRESENTATION = {"lora_modules", "structured_outputs_config"}

CONFIG_FLAT = """\
model: MODEL_FROM_CONFIG
max_model_len: 2048
gpu-memory-utilization: 0.85
enable-prefix-caching: true
enforce-eager: false
served-model-name:
  - a
  - b
port: 9123
"""
CONFIG_NESTED = """\
compilation-config:
  pass_config:
    fuse_allreduce_rms: true
speculative-config:
  method: ngram
  num_speculative_tokens: 3
tensor-parallel-size: 2
"""


def command_lines(tmp) -> list[list[str]]:
    flat, nested = tmp / "flat.yaml", tmp / "nested.yml"
    flat.write_text(CONFIG_FLAT)
    nested.write_text(CONFIG_NESTED)
    return [
        # a deployment's line: positional model, engine and frontend flags mixed
        [
            "serve",
            "org/model",
            "--tensor-parallel-size",
            "2",
            "--gpu-memory-utilization",
            "0.9",
            "--max-model-len",
            "8192",
            "--enable-prefix-caching",
            "--kv-cache-dtype",
            "fp8",
            "--served-model-name",
            "m",
            "--port",
            "8001",
            "--api-key",
            "k",
        ],
        # --model moved to the front; underscores; -O3; dotted JSON; list +
        [
            "serve",
            "--max_num_seqs",
            "64",
            "--model",
            "m",
            "-O3",
            "--compilation-config.mode",
            "3",
            "--compilation-config.cudagraph_capture_sizes+",
            "1,2,4",
            "--hf-overrides.rope_scaling.factor",
            "2.0",
        ],
        ["serve", "--config", str(flat)],
        ["serve", "positional", "--config", str(flat), "--max-model-len", "4096"],
        ["serve", "m", "--config", str(nested), "-tp", "4"],
        ["serve", "m", "--no-enable-prefix-caching", "--hf-token", "--max-model-len", "1k"],
    ]


@pytest.fixture(scope="module")
def vllm_side(tmp_path_factory):
    require_vllm()
    tmp = tmp_path_factory.mktemp("flags")
    lines = command_lines(tmp)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.vllm_flag_probe"],
        input=json.dumps(lines),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    data["lines"] = lines
    return data


def ours(argv: list[str]):
    return parse_args(build_parser(), argv)


def value_of(args, dest: str):
    """(where, value): the frontend's own argument or the recorded flag."""
    rec = vllm_flags.recorded(args)
    for where, values in (("engine", rec.engine), ("server", rec.server)):
        if dest in values:
            return where, values[dest]
    return "frontend", getattr(args, dest)


def test_the_flag_table_is_vllms(vllm_side):
    """frontend/ops/vllm_serve_flags.py equals what tools/gen_vllm_flags.py
    generates from the installed vLLM (regenerate it when this fails)."""
    table = (REPO_ROOT / "frontend" / "ops" / "vllm_serve_flags.py").read_text()
    assert table == vllm_side["table"]


def test_every_vllm_flag_is_accepted_with_vllms_value(vllm_side):
    failures = []
    checked = 0
    for flag in vllm_side["flags"]:
        dest = flag["dest"]
        if dest == "config":
            continue  # a file: test_config_files_read_as_vllm_reads_them
        assert len(flag["samples"]) == len(flag["options"]), flag
        for sample in flag["samples"]:
            try:
                args = ours(["serve", *sample["argv"]])
            except SystemExit:
                failures.append(f"{sample['argv']}: refused")
                continue
            where, value = value_of(args, dest)
            expected_where = "frontend" if dest in FRONTEND_FLAGS else ("engine", "server")
            if where not in expected_where:
                failures.append(f"{sample['argv']}: {where} flag, expected {expected_where}")
            elif sample["plain"] and dest not in OWN_REPRESENTATION and value != sample["value"]:
                failures.append(f"{sample['argv']}: {value!r}, vLLM: {sample['value']!r}")
            checked += 1
    assert not failures, "\n".join(failures)
    assert checked > 300  # every option string of ~316 flags


def test_frontend_flags_are_vllm_flags(vllm_side):
    """FRONTEND_FLAGS names only flags vLLM has (the list stays honest)."""
    assert FRONTEND_FLAGS <= {f["dest"] for f in vllm_side["flags"]}


def test_command_lines_parse_as_vllm_parses_them(vllm_side):
    """Whole command lines (positional or --model, --config flat and nested,
    underscores, -O3, dotted JSON flags): each flag has vLLM's value."""
    for argv, theirs in zip(vllm_side["lines"], vllm_side["parsed"]):
        assert theirs["ok"], (argv, theirs)
        args = ours(argv)
        values = theirs["values"]
        assert args.model == (values["model_tag"] or values.get("model")), argv
        given = {
            dest: v
            for dest, v in values.items()
            if dest not in ("model", "model_tag", "subparser", "dispatch_function")
        }
        assert given, argv
        for dest, value in given.items():
            if value is not None and dest not in OWN_REPRESENTATION:
                assert value_of(args, dest)[1] == value, (argv, dest)


def test_engine_flags_are_recorded_and_listed(tmp_path):
    args = ours(
        [
            "serve",
            "m",
            "--gpu-memory-utilization",
            "0.9",
            "--kv-cache-dtype",
            "fp8",
            "--enable-prefix-caching",
            "--block-size",
            "32",
            "--enforce-eager",
        ]
    )
    rec = vllm_flags.recorded(args)
    assert rec.engine == {
        "gpu_memory_utilization": 0.9,
        "kv_cache_dtype": "fp8",
        "enable_prefix_caching": True,
        "block_size": 32,
        "enforce_eager": True,
    }
    assert rec.cache_config() == {
        "gpu_memory_utilization": 0.9,
        "cache_dtype": "fp8",
        "enable_prefix_caching": True,
        "block_size": 32,
    }
    assert rec.describe(rec.engine) == (
        "--gpu-memory-utilization 0.9 --kv-cache-dtype fp8 "
        "--enable-prefix-caching --block-size 32 "
        "--enforce-eager"
    )


def vllm_cache_config_fields() -> dict[str, str]:
    """{flag dest: CacheConfig field} as vLLM builds its CacheConfig from its
    engine flags (``EngineArgs.create_engine_config``), read from its source:
    the keywords of the ``CacheConfig(...)`` call whose value is a flag
    (``self.<dest>``, also through a local it was resolved into)."""
    import ast
    import importlib.util

    source = Path(importlib.util.find_spec("vllm").origin).parent / "engine/arg_utils.py"
    function = next(
        node
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name == "create_engine_config"
    )
    assigned = {
        target.id: node.value
        for node in ast.walk(function)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }

    def flags_in(expr: ast.expr) -> list[str]:
        if isinstance(expr, ast.Name) and expr.id in assigned:
            expr = assigned[expr.id]
        return [
            n.attr
            for n in ast.walk(expr)
            if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name)
            and n.value.id == "self"
        ]

    call = next(
        node
        for node in ast.walk(function)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "CacheConfig"
    )
    fields = {}
    for keyword in call.keywords:
        dests = flags_in(keyword.value)
        if dests:
            assert len(dests) == 1, ast.dump(keyword)
            fields[dests[0]] = keyword.arg
    return fields


def test_cache_flags_are_the_flags_vllm_makes_its_cache_config_of():
    """RecordedFlags.cache_config() (what labels vllm:cache_config_info) names
    the CacheConfig field each engine flag sets in vLLM, renames included."""
    require_vllm()
    fields = vllm_cache_config_fields()
    assert fields["kv_cache_dtype"] == "cache_dtype" and len(fields) > 10, fields
    assert vllm_flags._CACHE_CONFIG_FIELDS == fields


def test_bad_values_exit_2_as_in_vllm(capsys):
    for argv in (
        ["--max-model-len", "lots"],
        ["--dtype", "float8"],
        ["--gpu-memory-utilization", "x"],
        ["--no-such-flag"],
    ):
        with pytest.raises(SystemExit) as e:
            ours(["serve", "m", *argv])
        assert e.value.code == 2, argv


def test_engine_address_defaults_to_where_a_headless_vllm_connects():
    assert ours(["m"]).engine_addr == "tcp://127.0.0.1:29550"
    assert (
        ours(
            ["m", "--data-parallel-address", "10.0.0.5", "--data-parallel-rpc-port", "29600"]
        ).engine_addr
        == "tcp://10.0.0.5:29600"
    )
    assert ours(["m", "--master-addr", "10.0.0.6"]).engine_addr == "tcp://10.0.0.6:29550"
    assert ours(["m", "--engine-addr", "tcp://h:1"]).engine_addr == "tcp://h:1"
    # the old form keeps working, and vLLM's default model
    assert ours(["--engine-addr", "tcp://h:1", "--model", "/m"]).model == "/m"
    assert ours([]).model == "Qwen/Qwen3-0.6B"


def test_default_host_is_all_interfaces_with_a_warning(tiny_model_dir):
    """As vLLM, the default listens on every interface; without an API key the
    start says so. Engine flags are listed once. (No engine: the start ends
    after --engine-ready-timeout, before listening.)"""
    from harness.ports import free_port

    def start(*extra: str) -> str:
        proc = subprocess.run(
            [
                str(BIN_DIR / "frontend"),
                "serve",
                str(tiny_model_dir),
                "--engine-addr",
                f"tcp://127.0.0.1:{free_port()}",
                "--engine-ready-timeout",
                "0.5",
                "--engine-state-file",
                "",
                "--gpu-memory-utilization",
                "0.8",
                *extra,
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env={k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"},
        )
        assert proc.returncode == 1, proc.stderr  # no engine came
        return proc.stderr

    warning = "listening on 0.0.0.0:8000 (all interfaces) without --api-key"
    log = start()
    assert warning in log
    assert log.count("engine flags: not used by the frontend: --gpu-memory-utilization 0.8") == 1
    assert warning not in start("--api-key", "k")
    assert "without --api-key" not in start("--host", "127.0.0.1")
