"""The example systemd units in tools/systemd/: valid for systemd, and their
ExecStart lines (after systemd's variable expansion with the example
environment files) use flags our CLIs and ``vllm serve`` accept."""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.requirements import require_tool, require_vllm

ROOT = Path(__file__).resolve().parent.parent
UNITS = ROOT / "tools" / "systemd"
INSTALLED_BIN = "/opt/vllm/.venv/bin/"
ENV_FILES = {"/etc/default/vllm": UNITS / "vllm.env",
             "/etc/default/vllm-frontend": UNITS / "vllm-frontend.env"}


def read_unit(name: str) -> dict[str, dict[str, list[str]]]:
    """[section] -> key -> values (systemd keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    logical = ""
    for raw in (UNITS / name).read_text().splitlines():
        line = logical + raw.strip()
        if line.endswith("\\"):
            logical = line[:-1] + " "
            continue
        logical = ""
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def read_env_file(path: Path) -> dict[str, str]:
    """systemd's EnvironmentFile= format: KEY=VALUE lines, # comments, optional quotes."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key.strip()), line
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key.strip()] = value
    return env


def expand_exec(line: str, env: dict[str, str]) -> list[str]:
    """systemd's ExecStart= expansion: ``$NAME`` alone becomes several words
    (split at whitespace), ``${NAME}`` becomes part of one word."""
    argv: list[str] = []
    for word in shlex.split(line):
        alone = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if alone:
            argv.extend(env.get(alone.group(1), "").split())
            continue
        for name in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", word):
            assert name in env, f"${{{name}}} is not set by the environment files"
        argv.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}",
                           lambda m: env[m.group(1)], word))
    return argv


def unit_argv(name: str, instance: str | None = None) -> tuple[dict, list[str]]:
    """The unit's ExecStart as systemd runs it (``%i``: the template's instance)."""
    unit = read_unit(name)
    env: dict[str, str] = {}
    for value in unit["Service"].get("EnvironmentFile", []):
        env.update(read_env_file(ENV_FILES[value.lstrip("-")]))
    for value in unit["Service"].get("Environment", []):
        for item in shlex.split(value):
            k, _, v = item.partition("=")
            env[k] = v
    (exec_start,) = unit["Service"]["ExecStart"]
    if instance is not None:
        exec_start = exec_start.replace("%i", instance)
    return unit, expand_exec(exec_start, env)


def test_frontend_unit_execstart_parses_with_our_cli():
    from frontend.cli import build_parser
    from frontend.ops import flags
    unit, argv = unit_argv("vllm-frontend.service")
    assert argv[0] == INSTALLED_BIN + "frontend"
    args = build_parser().parse_args(argv[1:])  # SystemExit on any unknown flag
    assert args.engine_addr == "tcp://127.0.0.1:29550"
    assert args.served_model_name == ["qwen"]
    flags.config_from_args(args, environ={})
    # systemd must wait longer than the drain before it kills.
    stop = int(unit["Service"]["TimeoutStopSec"][0])
    assert stop > args.shutdown_timeout
    # The state file lives in the preserved runtime directory.
    runtime = unit["Service"]["RuntimeDirectory"][0]
    assert args.engine_state_file.startswith(f"/run/{runtime}/")
    assert unit["Service"]["RuntimeDirectoryPreserve"] == ["yes"]
    assert unit["Service"]["Type"] == ["notify"]
    assert int(unit["Service"]["WatchdogSec"][0]) > 0
    # The engine must not be ordered after the frontend (READY needs the engine).
    assert "vllm-engine.service" in unit["Unit"]["After"][0]
    assert "vllm-frontend" not in "".join(
        read_unit("vllm-engine.service")["Unit"].get("After", []))


def test_frontend_unit_commented_alternatives_parse():
    """The optional FRONTEND_ARGS lines in the env example use real flags too."""
    from frontend.cli import build_parser
    text = (UNITS / "vllm-frontend.env").read_text()
    for line in re.findall(r"^#FRONTEND_ARGS=\.\.\. (.*)$", text, re.M):
        build_parser().parse_args(["--engine-addr", "tcp://127.0.0.1:1", "--model", "m",
                                   *line.split()])


def test_engine_unit_alternative_parses_with_engine_core():
    from engine_core import launcher
    from engine_core.cli import build_parser
    text = (UNITS / "vllm-engine.service").read_text()
    match = re.search(r"^#\s+ExecStart=(.*?\\\n(?:#.*\\\n)*#.*)$", text, re.M)
    assert match, "the engine-core alternative is documented in the unit"
    line = re.sub(r"\\\n#\s*", " ", match.group(1))
    env = read_env_file(ENV_FILES["/etc/default/vllm"])
    argv = expand_exec(line, env)
    assert argv[0] == INSTALLED_BIN + "engine-core"
    args, vllm_args = build_parser().parse_known_args(argv[1:])
    assert not launcher.given_flags(vllm_args, launcher.RESERVED_FLAGS)
    assert launcher.parse_frontend_addr(args.frontend_addr) == ("127.0.0.1", 29550)


VLLM_PARSE = """
import json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
for argv in json.loads(sys.argv[1]):
    args = make_arg_parser(FlexibleArgumentParser(prog="vllm serve")).parse_args(argv)
    print(json.dumps({"model_tag": args.model_tag, "headless": args.headless,
                      "address": args.data_parallel_address, "port": args.data_parallel_rpc_port,
                      "dp": [args.data_parallel_size, args.data_parallel_size_local,
                             args.data_parallel_start_rank]}))
"""
# (unit, instance, vLLM's data parallel settings); DP_SIZE=1 in the example env file.
ENGINE_UNITS = [("vllm-engine.service", None, [1, None, None]),
                ("vllm-engine@.service", "1", [1, 1, 1])]


def test_engine_units_execstart_parses_with_vllm_serve():
    """vLLM's own parser (one import of it, ~30 s, for both units)."""
    require_vllm()
    argvs = [unit_argv(name, instance)[1] for name, instance, _ in ENGINE_UNITS]
    for argv in argvs:
        assert argv[:3] == [INSTALLED_BIN + "vllm", "serve",
                            "/var/lib/vllm/models/Qwen2.5-7B-Instruct"]
    proc = subprocess.run([sys.executable, "-c", VLLM_PARSE,
                           json.dumps([argv[2:] for argv in argvs])],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    parsed = [json.loads(line) for line in proc.stdout.strip().splitlines()[-len(argvs):]]
    assert parsed == [{"model_tag": argv[2], "headless": True, "address": "127.0.0.1",
                       "port": 29550, "dp": dp} for argv, (_, _, dp) in zip(argvs, ENGINE_UNITS)]


def test_rank_unit_gives_each_rank_its_own_launcher():
    unit, argv = unit_argv("vllm-engine@.service", "3")
    assert argv[argv.index("--data-parallel-start-rank") + 1] == "3"
    assert argv[argv.index("--data-parallel-size-local") + 1] == "1"
    assert "CUDA_VISIBLE_DEVICES=%i" in unit["Service"]["Environment"]


def assert_restarts_after_any_unasked_exit(name: str) -> None:
    """Restart=always: systemd then restarts after every end but `systemctl stop`,
    status 0 and SIGTERM/SIGHUP included, which Restart=on-failure counts as clean
    (vllm serve --headless exits 0 when its engine core process dies)."""
    unit = read_unit(name)
    assert unit["Service"]["Restart"] == ["always"], name
    restart_s = int(unit["Service"]["RestartSec"][0])
    interval_s = int(unit["Unit"]["StartLimitIntervalSec"][0])
    burst = int(unit["Unit"]["StartLimitBurst"][0])
    assert restart_s > 0  # no busy loop
    # The start limit stops a crash loop (starts RestartSec apart) within its
    # interval, and never the restart after one death.
    assert burst >= 3 and burst * restart_s < interval_s, (burst, restart_s, interval_s)
    # [Unit] is their place (in [Service], StartLimitIntervalSec is an unknown key).
    assert not {"StartLimitIntervalSec", "StartLimitBurst"} & unit["Service"].keys()


def test_engine_unit_restarts_after_a_dead_engine_core():
    assert_restarts_after_any_unasked_exit("vllm-engine.service")
    assert_restarts_after_any_unasked_exit("vllm-engine@.service")
    text = (UNITS / "vllm-engine.service").read_text()
    assert "exits 0 when its" in text and "engine core process dies" in text  # says why


def test_frontend_unit_restarts_after_any_unasked_exit():
    assert_restarts_after_any_unasked_exit("vllm-frontend.service")


def test_units_are_plain_ini():
    """Also readable by configparser (no stray syntax) with the sections systemd wants."""
    for name in ("vllm-engine.service", "vllm-engine@.service", "vllm-frontend.service"):
        cp = configparser.ConfigParser(strict=False, interpolation=None)
        cp.read_string((UNITS / name).read_text())
        assert cp.sections() == ["Unit", "Service", "Install"]


def test_systemd_analyze_verify(tmp_path):
    """systemd's own checker: directives, values, executables. The installed
    paths (/opt/vllm/.venv/bin/...) point at this checkout's venv here."""
    tool = require_tool("systemd-analyze", "apt-get install systemd; .ci/run installs it")
    bin_dir = Path(sys.executable).parent
    vllm_bin = bin_dir / "vllm"
    if not vllm_bin.exists():  # only the path matters to verify
        vllm_bin = tmp_path / "vllm"
        vllm_bin.write_text("#!/bin/sh\n")
        vllm_bin.chmod(0o755)
    units = []
    for name, installed in (("vllm-engine.service", "vllm-engine.service"),
                            ("vllm-engine@.service", "vllm-engine@0.service"),
                            ("vllm-frontend.service", "vllm-frontend.service")):
        text = (UNITS / name).read_text()
        text = text.replace(INSTALLED_BIN + "vllm ", f"{vllm_bin} ")
        text = text.replace(INSTALLED_BIN, f"{bin_dir}/")
        if name != installed:  # a template is verified as one of its instances
            (tmp_path / name).write_text(text)
            (tmp_path / installed).symlink_to(tmp_path / name)
        else:
            (tmp_path / installed).write_text(text)
        units.append(str(tmp_path / installed))
    proc = subprocess.run([tool, "verify", "--man=no", *units], capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"})
    ours = [line for line in (proc.stdout + proc.stderr).splitlines()
            if "vllm-" in line]
    assert proc.returncode == 0 and not ours, proc.stdout + proc.stderr
