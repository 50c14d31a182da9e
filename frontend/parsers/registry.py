"""Parser names: vLLM 0.32's ``--tool-call-parser`` / ``--reasoning-parser``.

Each line is a vLLM name (exactly as its ``_TOOL_PARSERS_TO_REGISTER`` /
``_REASONING_PARSERS_TO_REGISTER`` spell it) -> (the module in
``parsers/tool/`` or ``parsers/reasoning/``, the class); an alias is a second
line with the same target, where vLLM has one too
(``tests/test_parser_registry.py``).  A parser's module is imported when its
name is first used.  A new parser is its module and one line here (see
``frontend/parsers/README.md``).
"""

from __future__ import annotations

import importlib

from frontend.parsers.reasoning.base import ReasoningParser
from frontend.parsers.tool.base import ToolParser

TOOL_PARSERS: dict[str, tuple[str, str]] = {
    "apertus": ("apertus", "ApertusToolParser"),
    "cohere_command3": ("cohere_command", "CohereCommand3ToolParser"),
    "cohere_command4": ("cohere_command", "CohereCommand4ToolParser"),
    "deepseek_v3": ("deepseek_v3", "DeepSeekV3ToolParser"),
    "deepseek_v31": ("deepseek_v31", "DeepSeekV31ToolParser"),
    "deepseek_v32": ("deepseek_v32", "DeepSeekV32EngineToolParser"),
    "deepseek_v4": ("deepseek_v4", "DeepSeekV4EngineToolParser"),
    "deepseek_v41": ("deepseek_v4", "DeepSeekV41EngineToolParser"),
    "dots": ("dots", "DotsToolParser"),
    "ernie45": ("ernie45", "Ernie45ToolParser"),
    "functiongemma": ("functiongemma", "FunctionGemmaToolParser"),
    "gemma4": ("gemma4", "Gemma4EngineToolParser"),
    "gigachat3": ("gigachat3", "GigaChat3ToolParser"),
    "glm45": ("glm47", "Glm47MoeModelToolParser"),
    "glm47": ("glm47", "Glm47MoeModelToolParser"),
    "granite": ("granite", "GraniteEngineToolParser"),
    "granite-20b-fc": ("granite_20b_fc", "Granite20bFCToolParser"),
    "granite4": ("granite4", "Granite4ToolParser"),
    "hermes": ("hermes", "HermesToolParser"),
    "hf": ("hf", "ResponseTemplateToolParser"),
    "hunyuan_a13b": ("hunyuan_a13b", "HunyuanA13BToolParser"),
    "hy_v3": ("hy_v3", "HYV3ToolParser"),
    "hy_v4": ("hy_v4", "HYV4ToolParser"),
    "inkling": ("inkling", "InklingEngineToolParser"),
    "internlm": ("internlm", "Internlm2ToolParser"),
    "jamba": ("jamba", "JambaToolParser"),
    "k2_horizon": ("k2_horizon", "K2HorizonToolParser"),
    "kimi_k2": ("kimi_k2", "KimiK2ToolParser"),
    "kimi_k3": ("kimi_k3", "KimiK3ToolParser"),
    "lfm2": ("lfm2", "Lfm2ToolParser"),
    "ling3": ("ling3", "Ling3ToolParser"),
    "llama3_json": ("llama3_json", "Llama3JsonToolParser"),
    "llama4_json": ("llama3_json", "Llama3JsonToolParser"),
    "llama4_pythonic": ("llama4_pythonic", "Llama4PythonicToolParser"),
    "longcat": ("longcat", "LongcatFlashToolParser"),
    "mimo": ("qwen3_variants", "MiMoToolParser"),
    "minicpm5": ("minicpm5", "MiniCPM5ToolParser"),
    "minimax_m2": ("minimax_m2", "MinimaxM2ToolParser"),
    "minimax_m3": ("minimax_m3", "MinimaxM3ToolParser"),
    "mistral": ("mistral", "MistralToolParser"),
    "muse_glimmer": ("muse_glimmer", "MuseGlimmerToolParser"),
    "olmo3": ("olmo3", "Olmo3PythonicToolParser"),
    "phi4_mini_json": ("phi4_mini_json", "Phi4MiniJsonToolParser"),
    "plamo3": ("plamo3", "Plamo3EngineToolParser"),
    "poolside_v1": ("poolside_v1", "PoolsideV1ToolParser"),
    "pythonic": ("pythonic", "PythonicToolParser"),
    "qwen3_coder": ("qwen3_coder", "Qwen3CoderToolParser"),
    "qwen3_json": ("hermes", "HermesToolParser"),
    "qwen3_xml": ("qwen3_coder", "Qwen3CoderToolParser"),
    "seed_oss": ("qwen3_variants", "SeedOssEngineToolParser"),
    "step3": ("step3", "Step3ToolParser"),
    "step3p5": ("qwen3_variants", "Step3p5ToolParser"),
    "xlam": ("xlam", "xLAMToolParser"),
}

REASONING_PARSERS: dict[str, tuple[str, str]] = {
    "cohere_command3": ("cohere_command", "CohereCommand3ReasoningParser"),
    "cohere_command4": ("cohere_command", "CohereCommand4ReasoningParser"),
    "deepseek_r1": ("deepseek_r1", "DeepSeekR1ReasoningParser"),
    "deepseek_v3": ("deepseek_v3", "DeepSeekV3ReasoningParser"),
    "deepseek_v4": ("deepseek_v4", "DeepSeekV4ReasoningParser"),
    "deepseek_v41": ("deepseek_v41", "DeepSeekV41ReasoningParser"),
    "ernie45": ("ernie45", "Ernie45ReasoningParser"),
    "gemma4": ("gemma4", "Gemma4ParserReasoningAdapter"),
    "glm45": ("glm47", "Glm47MoeReasoningParser"),
    "glm47": ("glm47", "Glm47MoeReasoningParser"),
    "granite": ("granite", "GraniteReasoningParser"),
    "granite_thinking_parser": ("granite_thinking", "GraniteThinkingReasoningParser"),
    "hf": ("hf", "ResponseTemplateReasoningParser"),
    "holo2": ("deepseek_v3", "DeepSeekV3ReasoningWithThinkingParser"),
    "hunyuan_a13b": ("hunyuan_a13b", "HunyuanA13BReasoningParser"),
    "hy_v3": ("hy_v3", "HYV3ReasoningParser"),
    "hy_v4": ("hy_v4", "HYV4ReasoningParser"),
    "inkling": ("inkling", "InklingParserReasoningAdapter"),
    "k2_horizon": ("k2_horizon", "K2HorizonReasoningParser"),
    "kimi_k2": ("kimi_k2", "KimiK2ReasoningParser"),
    "kimi_k3": ("kimi_k3", "KimiK3ReasoningParser"),
    "ling3": ("ling3", "Ling3ReasoningParser"),
    "mimo": ("mimo", "MiMoReasoningParser"),
    "minicpmv": ("minicpmv", "MiniCPMVParserReasoningAdapter"),
    "minimax_m2": ("minimax_m2", "MiniMaxM2ReasoningParser"),
    "minimax_m3": ("minimax_m3", "MiniMaxM3ReasoningParser"),
    "minimax_m2_append_think": ("minimax_m2_append_think", "MiniMaxM2AppendThinkReasoningParser"),
    "mistral": ("mistral", "MistralReasoningParser"),
    "muse_glimmer": ("muse_glimmer", "MuseGlimmerReasoningParser"),
    "nemotron_v3": ("nemotron_v3", "NemotronV3ReasoningParser"),
    "olmo3": ("olmo3", "Olmo3ReasoningParser"),
    "plamo3": ("plamo3", "Plamo3ParserReasoningAdapter"),
    "poolside_v1": ("poolside_v1", "PoolsideV1ReasoningParser"),
    "qwen3": ("qwen3", "Qwen3ReasoningParser"),
    "seed_oss": ("seed_oss", "SeedOssReasoningParser"),
    "step3": ("step3", "Step3ReasoningParser"),
    "step3p5": ("step3p5", "Step3p5ReasoningParser"),
}


# Classes registered at start-up by --tool-parser-plugin / --reasoning-parser-plugin
# modules (frontend/parsers/plugins.py); as in vLLM, one wins over a built-in name.
PLUGIN_TOOL_PARSERS: dict[str, type[ToolParser]] = {}
PLUGIN_REASONING_PARSERS: dict[str, type[ReasoningParser]] = {}

# vLLM's gpt-oss parsers work on the Harmony encoding, whose vocabulary file
# openai_harmony downloads on first use: there is none to be had offline.
HARMONY_ONLY = {"openai": "tool call parser", "openai_gptoss": "reasoning parser"}


def tool_parser_names() -> list[str]:
    return sorted(TOOL_PARSERS.keys() | PLUGIN_TOOL_PARSERS.keys())


def _load(
    table: dict[str, tuple[str, str]], plugins: dict[str, type], package: str, name: str, kind: str
) -> type:
    if name in plugins:
        return plugins[name]
    target = table.get(name)
    if target is None:
        if HARMONY_ONLY.get(name) == kind:
            raise ValueError(
                f"the {kind} {name!r} (gpt-oss) needs the Harmony encoding, whose "
                "vocabulary file cannot be had offline: not supported by this frontend"
            )
        available = sorted(table.keys() | plugins.keys())
        raise ValueError(f"unknown {kind} {name!r}; available: {', '.join(available)}")
    module, cls = target
    return getattr(importlib.import_module(f"frontend.parsers.{package}.{module}"), cls)


def tool_parser_class(name: str) -> type[ToolParser]:
    return _load(TOOL_PARSERS, PLUGIN_TOOL_PARSERS, "tool", name, "tool call parser")


def reasoning_parser_class(name: str) -> type[ReasoningParser]:
    return _load(REASONING_PARSERS, PLUGIN_REASONING_PARSERS, "reasoning", name, "reasoning parser")
