"""Run the same model output through vLLM 0.32's parsers and ours, and compare.

The output is tokenized with the tiny model's tokenizer and replayed as the
engine would deliver it: per step, the new text (held back while it ends in
an incomplete UTF-8 character) and the step's token ids, with the EOS token
(no text) in the last step.  Steps are one token, a few tokens, random
sizes, or the whole output at once.

Compared: the non-streaming (reasoning, content, tool calls) exactly; every
streamed delta exactly, as vLLM serializes it (``exclude_unset``), tool call
ids masked; the reasoning token counts; whether tool call pieces were sent.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from frontend.model import ModelInfo
from frontend.parsers import ChatParsers, ParserTokenizer

EOS_ID = 5  # <|im_end|>
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"},
            "metric": {"type": "boolean"},
            "options": {"type": "object", "properties": {"detail": {"type": "number"}}},
        }, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
        }}}},
]
USER = [{"role": "user", "content": "hi"}]
CHUNKINGS = ("token", "three", "random", "whole")


@dataclass
class Case:
    id: str
    text: str
    tool_choice: Any = "auto"
    tools: list | None = field(default_factory=lambda: TOOLS)
    chat_template_kwargs: dict | None = None
    include_reasoning: bool = True
    # Decode the steps with skip_special_tokens=True (the request default
    # when the parser does not turn it off).
    skip_special: bool = False
    eos: bool = True
    prompt_suffix: str = ""  # appended to the rendered prompt (e.g. "<think>\n")

    def __str__(self) -> str:
        return self.id


class Differ:
    """vLLM's parser stack and ours over the same tokenizer files."""

    def __init__(self, model: ModelInfo, vllm_tokenizer: Any) -> None:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.parser import ParserManager

        self.model = model
        self.tokenizer = ParserTokenizer.from_model(model)
        self.vtok = vllm_tokenizer
        self._request_cls = ChatCompletionRequest
        self._manager = ParserManager

    # -- inputs ----------------------------------------------------------------

    def prompt_ids(self, case: Case) -> list[int]:
        prompt = "<s><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n" + case.prompt_suffix
        return self.model.encode(prompt, add_special_tokens=False)

    def output_ids(self, case: Case) -> list[int]:
        ids = self.model.encode(case.text, add_special_tokens=False)
        return ids + [EOS_ID] if case.eos else ids

    def output_text(self, case: Case, ids: list[int]) -> str:
        if case.eos:
            ids = ids[:-1]
        return self.model.decode(ids, skip_special_tokens=case.skip_special)

    def steps(self, case: Case, chunking: str) -> list[tuple[str, list[int]]]:
        ids = self.output_ids(case)
        body = ids[:-1] if case.eos else ids
        if chunking == "whole":
            sizes = [len(body)]
        elif chunking == "token":
            sizes = [1] * len(body)
        elif chunking == "three":
            sizes = [3] * (len(body) // 3 + 1)
        else:
            rng = random.Random(case.id)
            sizes = [rng.randint(1, 6) for _ in body]
        steps: list[tuple[str, list[int]]] = []
        sent, pos = "", 0
        held: list[int] = []
        for size in sizes:
            if pos >= len(body):
                break
            held.extend(body[pos:pos + size])
            pos += size
            text = self.model.decode(body[:pos], skip_special_tokens=case.skip_special)
            if text.endswith("\ufffd"):
                continue  # the detokenizer holds back a partial character
            steps.append((text[len(sent):], held))
            sent, held = text, []
        if held:
            steps.append(("", held))
        if case.eos:
            steps.append(("", [EOS_ID]))
        return steps

    # -- the two stacks ----------------------------------------------------------

    def vllm_request(self, case: Case) -> Any:
        kwargs: dict[str, Any] = {"model": "tiny", "messages": USER,
                                  "include_reasoning": case.include_reasoning}
        if case.tools is not None:
            kwargs.update(tools=case.tools, tool_choice=case.tool_choice)
        if case.chat_template_kwargs is not None:
            kwargs["chat_template_kwargs"] = case.chat_template_kwargs
        return self._request_cls(**kwargs)

    def vllm_parser(self, tool: str | None, reasoning: str | None, case: Case) -> Any:
        cls = self._manager.get_parser(tool_parser_name=tool, reasoning_parser_name=reasoning,
                                       enable_auto_tools=True, tokenizer=self.vtok)
        request = self.vllm_request(case)
        return cls(self.vtok, request.tools,
                   chat_template_kwargs=case.chat_template_kwargs or {}), request

    def our_parser(self, tool: str | None, reasoning: str | None, case: Case) -> Any:
        parsers = ChatParsers(self.tokenizer, tool_parser=tool, reasoning_parser=reasoning)
        tool_choice = case.tool_choice if case.tools is not None else "none"
        return parsers.new(tools=case.tools, tool_choice=tool_choice,
                           include_reasoning=case.include_reasoning,
                           chat_template_kwargs=case.chat_template_kwargs or {},
                           prompt_token_ids=self.prompt_ids(case))

    # -- comparisons -----------------------------------------------------------------

    def compare_whole(self, tool: str | None, reasoning: str | None, case: Case) -> None:
        ids = self.output_ids(case)
        text = self.output_text(case, ids)
        vparser, request = self.vllm_parser(tool, reasoning, case)
        vparser.set_prompt_token_ids(self.prompt_ids(case))  # as vLLM's serving does
        v_reasoning, v_content, v_calls = vparser.parse(text, request, enable_auto_tools=True,
                                                        model_output_token_ids=ids)
        if not case.include_reasoning:
            v_reasoning = None
        ours = self.our_parser(tool, reasoning, case)
        parsed = ours.parse(text)
        expected = (v_reasoning, v_content,
                    None if v_calls is None else [(c.name, c.arguments) for c in v_calls])
        actual = (parsed.reasoning, parsed.content, None if parsed.tool_calls is None
                  else [(c.name, c.arguments) for c in parsed.tool_calls])
        assert actual == expected, f"{case}: text {text!r}"
        assert ours.count_reasoning_tokens(ids) == vparser.count_reasoning_tokens(ids), case

    def compare_stream(self, tool: str | None, reasoning: str | None, case: Case,
                       chunking: str) -> list[dict | None]:
        steps = self.steps(case, chunking)
        prompt = self.prompt_ids(case)
        vparser, request = self.vllm_parser(tool, reasoning, case)
        ours = self.our_parser(tool, reasoning, case)
        expected, actual = [], []
        for k, (text, ids) in enumerate(steps):
            last = k == len(steps) - 1
            d = vparser.parse_delta(text, list(ids), request, prompt, finished=last)
            expected.append(None if d is None else _masked(d.model_dump(exclude_unset=True)))
            d = ours.feed(text, ids, finished=last)
            actual.append(None if d is None else _masked(d.to_dict()))
        for k, (e, a) in enumerate(zip(expected, actual)):
            assert a == e, f"{case} [{chunking}] step {k} {steps[k]!r}: ours {a} vLLM {e}"
        all_ids = [t for _, ids in steps for t in ids]
        assert ours.count_reasoning_tokens(all_ids) == vparser.count_reasoning_tokens(all_ids)
        assert ours.tools_streamed == any(e and e.get("tool_calls") for e in expected)
        return actual


# Fields of a response that differ between any two servers.
IGNORED = ("id", "created", "system_fingerprint")


def masked(value: Any) -> Any:
    """A response (or a part) to compare across servers: tool call ids are
    random (``<id>``); response ids and times dropped."""
    if isinstance(value, dict):
        out = {k: masked(v) for k, v in value.items() if k not in IGNORED}
        for call in out.get("tool_calls") or ():
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                call["id"] = "<id>"
        return out
    if isinstance(value, list):
        return [masked(v) for v in value]
    return value


def tokenizer_dir(source: Path, target: Path, tokens: dict[str, bool],
                  config: dict[str, Any] | None = None) -> Path:
    """A copy of the model files in ``source`` whose tokenizer has ``tokens``
    (text -> special?) added, and ``config`` merged into tokenizer_config.json."""
    from tokenizers import AddedToken, Tokenizer

    for name in ("config.json", "generation_config.json", "special_tokens_map.json"):
        shutil.copy(source / name, target / name)
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    tokenizer_config = json.loads((source / "tokenizer_config.json").read_text())
    for text, special in tokens.items():
        token = AddedToken(text, special=special, normalized=False)
        (tokenizer.add_special_tokens if special else tokenizer.add_tokens)([token])
        tokenizer_config["added_tokens_decoder"][str(tokenizer.token_to_id(text))] = {
            "content": text, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": special}
    tokenizer.save(str(target / "tokenizer.json"))
    tokenizer_config.update(config or {})
    (target / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return target


def _masked(delta: dict) -> dict:
    delta = json.loads(json.dumps(delta))
    for call in delta.get("tool_calls", []):
        if isinstance(call.get("id"), str):
            call["id"] = "<id>"
    return delta


def assemble(deltas: list[dict | None]) -> dict:
    """Content, reasoning and per-index tool calls from streamed deltas."""
    out: dict[str, Any] = {"content": "", "reasoning": "", "calls": {}}
    for d in deltas:
        if not d:
            continue
        out["content"] += d.get("content") or ""
        out["reasoning"] += d.get("reasoning") or ""
        for call in d.get("tool_calls", []):
            slot = out["calls"].setdefault(call["index"], {"name": None, "arguments": ""})
            function = call.get("function") or {}
            if function.get("name"):
                slot["name"] = function["name"]
            slot["arguments"] += function.get("arguments") or ""
    return out
