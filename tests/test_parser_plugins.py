"""``--tool-parser-plugin`` / ``--reasoning-parser-plugin``: a user's parser
file, loaded as vLLM loads one, registering names the server then serves."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

import pytest

from frontend import structured as so
from frontend.parsers import registry
from frontend.parsers.plugins import PluginError, ToolParserManager, load_plugin
from frontend.parsers.tool.hermes import HermesToolParser
from harness.frontend import launch_mock_stack
from tests.support.http_client import MODEL, client

PLUGIN = pathlib.Path(__file__).parent / "data" / "parser_plugin.py"
OUTPUT = '[[plan]]think about it[[/plan]]Sure. CALL get_weather {"city": "Paris"}'
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser", "call_line",
         "--tool-parser-plugin", str(PLUGIN), "--reasoning-parser", "plan_brackets",
         "--reasoning-parser-plugin", str(PLUGIN))


@pytest.fixture
def clean_registry():
    before = dict(registry.PLUGIN_TOOL_PARSERS), dict(registry.PLUGIN_REASONING_PARSERS)
    yield
    for table, saved in zip((registry.PLUGIN_TOOL_PARSERS, registry.PLUGIN_REASONING_PARSERS),
                            before):
        table.clear()
        table.update(saved)


def test_a_plugin_file_registers_its_names(clean_registry):
    module = load_plugin(str(PLUGIN), "--tool-parser-plugin")
    assert module is not None
    assert registry.tool_parser_class("call_line") is module.CallLineToolParser
    assert registry.tool_parser_class("call_line_alias") is module.CallLineToolParser
    assert registry.reasoning_parser_class("plan_brackets") is module.PlanReasoningParser
    assert "call_line" in registry.tool_parser_names()
    assert load_plugin("abc", "--tool-parser-plugin") is None  # vLLM: len(value) > 3


def test_register_module_as_vllm_spells_it(clean_registry):
    class Mine(HermesToolParser):
        pass

    ToolParserManager.register_module(module=Mine)  # name: the class's
    assert registry.tool_parser_class("Mine") is Mine
    ToolParserManager.register_module("hermes")(Mine)  # force=True: a plugin wins
    assert registry.tool_parser_class("hermes") is Mine
    with pytest.raises(KeyError, match="already registered"):
        ToolParserManager.register_module("pythonic", force=False, module=Mine)
    with pytest.raises(PluginError, match="subclass of this frontend's ToolParser"):
        ToolParserManager.register_module("x", module=dict)


def test_the_structured_outputs_config_loads_its_plugin_first(clean_registry):
    parser = argparse.ArgumentParser()
    so.add_arguments(parser)
    config = so.config_from_args(parser.parse_args([
        "--structured-outputs-config.reasoning_parser", "plan_brackets",
        "--structured-outputs-config.reasoning_parser_plugin", str(PLUGIN)]))
    assert config.reasoning_parser == "plan_brackets"


def run_frontend(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The frontend's start-up checks (they run before it reaches the engine)."""
    return subprocess.run([sys.executable, "-m", "frontend.cli", "--model", "unused",
                           "--engine-addr", "tcp://127.0.0.1:9", *args],
                          capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("plugin, message", [
    ("missing_plugin.py", "--tool-parser-plugin missing_plugin.py: FileNotFoundError"),
    ("BROKEN", "--tool-parser-plugin {path}: ZeroDivisionError: division by zero"),
    ("VLLM", "the plugin imports vLLM; this frontend never loads vLLM"),
])
def test_a_plugin_that_cannot_be_loaded_stops_the_start(tiny_model_dir, tmp_path, plugin,
                                                        message):
    env = None
    if plugin == "BROKEN":
        plugin = str(tmp_path / "broken.py")
        pathlib.Path(plugin).write_text("1 / 0\n")
    elif plugin == "VLLM":  # a stand-in vllm package: the check, without vLLM's import time
        (tmp_path / "vllm").mkdir()
        (tmp_path / "vllm" / "__init__.py").write_text("")
        plugin = str(tmp_path / "vllm_plugin.py")
        pathlib.Path(plugin).write_text("import vllm\n")
        env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{pathlib.Path.cwd()}"}
    done = run_frontend("--model", str(tiny_model_dir), "--enable-auto-tool-choice",
                        "--tool-call-parser", "hermes", "--tool-parser-plugin", plugin, env=env)
    assert done.returncode != 0
    assert message.format(path=plugin) in done.stderr, done.stderr


def test_harmony_parsers_are_refused_with_the_reason(tiny_model_dir):
    done = run_frontend("--model", str(tiny_model_dir), "--enable-auto-tool-choice",
                        "--tool-call-parser", "openai")
    assert done.returncode != 0 and "needs the Harmony encoding" in done.stderr, done.stderr
    done = run_frontend("--model", str(tiny_model_dir), "--reasoning-parser", "openai_gptoss")
    assert done.returncode != 0 and "needs the Harmony encoding" in done.stderr, done.stderr


@pytest.fixture(scope="module")
def stack(tiny_model_dir, tmp_path_factory):
    stack = launch_mock_stack(tiny_model_dir, tmp_path_factory.mktemp("plugins"), *FLAGS)
    yield stack
    stack.stop()


def script(stack, tiny_model_dir) -> None:
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json")).encode(
        OUTPUT, add_special_tokens=False).ids
    stack.control().script({"output_token_ids": ids, "finish": "stop"})


def test_the_plugins_parsers_serve_chat(stack, tiny_model_dir):
    script(stack, tiny_model_dir)
    reply = client(stack.url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "weather?"}], tools=TOOLS,
        max_tokens=200)
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "tool_calls"
    assert message.model_extra["reasoning"] == "think about it"
    assert message.content == "Sure. "
    [call] = message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "get_weather", {"city": "Paris"})


def test_the_plugins_parsers_stream(stack, tiny_model_dir):
    script(stack, tiny_model_dir)
    chunks = list(client(stack.url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "weather?"}], tools=TOOLS,
        max_tokens=200, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    reasoning = "".join((d.model_extra or {}).get("reasoning") or "" for d in deltas)
    content = "".join(d.content or "" for d in deltas)
    calls = [call for d in deltas for call in d.tool_calls or []]
    assert (reasoning, content) == ("think about it", "Sure. ")
    assert calls[0].function.name == "get_weather"
    assert json.loads("".join(c.function.arguments or "" for c in calls)) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    stack.frontend.wait_idle()
