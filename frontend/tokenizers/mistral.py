"""``--tokenizer-mode mistral``: a ``tekken.json`` tokenizer, as vLLM serves it.

vLLM 0.32 uses mistral_common here: text is encoded by its Tekkenizer (a
tiktoken BPE: control tokens are never read from text, a BOS starts a
prompt) and chat prompts are rendered to token ids by mistral_common's
``encode_chat_completion`` (no Jinja template). This frontend encodes and
decodes with a fast tokenizer converted from ``tekken.json`` (the same ids:
ranks shifted past the control tokens, which are special tokens that are
never matched in text), and renders chat prompts with mistral_common itself,
in a worker process (:mod:`.mistral_worker`): mistral_common needs pydantic
and numpy, which the serving process never imports. The worker starts with
the frontend and renders the prompts of every chat request.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import pathlib
import subprocess
import sys
import threading
from typing import Any

import msgspec
from tokenizers import Tokenizer

from frontend.bytelevel import BYTE_CHAR
from frontend.tokenizers.loaded import LoadedTokenizer

log = logging.getLogger("frontend.tokenizers")

# Control tokens vLLM's MistralTokenizer keeps when skipping special tokens.
KEPT_SPECIALS = ("[TOOL_CALLS]", "[ARGS]", "[THINK]", "[/THINK]")
# A template that only tells the message parser vLLM's "string" content
# format (the mistral renderer never renders it).
PARSING_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"


class RenderError(ValueError):
    """mistral_common refused the conversation (vLLM answers 400)."""


def load(tok_dir: pathlib.Path) -> LoadedTokenizer:
    path = tok_dir / "tekken.json"
    if not path.exists():
        found = sorted(p.name for p in tok_dir.glob("tokenizer.model.v*"))
        raise ValueError(
            f"--tokenizer-mode mistral: {tok_dir} has no tekken.json"
            + (
                f" (sentencepiece Mistral tokenizers such as {found[0]} are not served by "
                "this frontend)"
                if found
                else ""
            )
        )
    data = json.loads(path.read_text(encoding="utf-8"))
    tokenizer, specials = convert(data)
    kept = {i for i, text in enumerate(specials) if text in KEPT_SPECIALS}
    config = {"bos_token": "<s>", "eos_token": "</s>", "chat_template": PARSING_TEMPLATE}
    renderer = ChatRenderer(path)
    return LoadedTokenizer(
        tokenizer,
        config,
        "tekken.json (mistral_common chat rendering)",
        mode="mistral",
        render_chat=renderer.render,
        skip_ids=frozenset(range(len(specials))) - kept,
    )


def convert(data: dict[str, Any]) -> tuple[Tokenizer, list[str]]:
    """tekken.json -> (fast tokenizer with the Tekkenizer's ids, control token texts)."""
    cfg = data["config"]
    num_special = cfg["default_num_special_tokens"]
    inner = cfg["default_vocab_size"] - num_special
    specials = [t["token_str"] for t in data.get("special_tokens") or []]
    specials += [f"<SPECIAL_{i}>" for i in range(len(specials), num_special)]
    ranks = {base64.b64decode(t["token_bytes"]): t["rank"] for t in data["vocab"][:inner]}

    def text(token: bytes) -> str:
        return "".join(BYTE_CHAR[b] for b in token)

    merges = []
    for token, rank in ranks.items():
        local = [
            (token[:i], token[i:], rank)
            for i in range(1, len(token))
            if token[:i] in ranks and token[i:] in ranks
        ]
        local.sort(key=lambda m: (ranks[m[0]], ranks[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2])
    vocab = {text(t): r + num_special for t, r in ranks.items()}
    clashes = [content for content in specials if content in vocab]
    if clashes:
        raise ValueError(f"tekken.json: control tokens {clashes} are also regular tokens")
    # The control tokens hold ids 0..num_special-1 in the model's vocabulary
    # too, so that the added tokens keep those ids.
    vocab.update((content, i) for i, content in enumerate(specials))
    spec = {
        "version": "1.0",
        "added_tokens": [
            {
                "id": i,
                "content": content,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, content in enumerate(specials)
        ],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": cfg["pattern"]},
                    "behavior": "Isolated",
                    "invert": False,
                },
                {
                    "type": "ByteLevel",
                    "add_prefix_space": False,
                    "trim_offsets": True,
                    "use_regex": False,
                },
            ],
        },
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": specials[1], "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
            ],
            "pair": [
                {"SpecialToken": {"id": specials[1], "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {
                specials[1]: {"id": specials[1], "ids": [1], "tokens": [specials[1]]}
            },
        },
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": True,
            "use_regex": False,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": vocab,
            "merges": [[text(a), text(b)] for a, b, _ in merges],
        },
    }
    tokenizer = Tokenizer.from_str(json.dumps(spec))
    tokenizer.encode_special_tokens = True  # tekken never reads control tokens from text
    return tokenizer, specials


class ChatRenderer:
    """Chat prompts -> token ids by mistral_common, in a worker process.

    One request at a time over the worker's pipes (called from the renderer's
    executor threads); a worker that died is started again on the next call.
    """

    def __init__(self, tekken_path: pathlib.Path) -> None:
        self.path = tekken_path
        self._lock = threading.Lock()
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder()
        self._proc: subprocess.Popen | None = None
        self._start()

    def _start(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "frontend.tokenizers.mistral_worker", str(self.path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ},
            start_new_session=False,
        )
        ready = self._read()
        if ready.get("error"):
            raise ValueError(f"--tokenizer-mode mistral: {ready['error']}")
        log.info(
            "mistral_common chat renderer: worker pid %d (%s)", self._proc.pid, ready.get("version")
        )

    def _read(self) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        header = self._proc.stdout.read(4)
        if len(header) < 4:
            raise ConnectionError("the mistral_common worker exited")
        return self._decoder.decode(self._proc.stdout.read(int.from_bytes(header, "little")))

    def render(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list | None,
        add_generation_prompt: bool,
        continue_final_message: bool,
        reasoning_effort: str | None,
    ) -> list[int]:
        request = self._encoder.encode(
            {
                "messages": messages,
                "tools": tools,
                "add_generation_prompt": add_generation_prompt,
                "continue_final_message": continue_final_message,
                "reasoning_effort": reasoning_effort,
            }
        )
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            assert self._proc is not None and self._proc.stdin is not None
            try:
                self._proc.stdin.write(len(request).to_bytes(4, "little") + request)
                self._proc.stdin.flush()
                reply = self._read()
            except (BrokenPipeError, ConnectionError):
                self._proc = None
                raise RenderError("the mistral_common renderer exited; try again") from None
        if "error" in reply:
            raise RenderError(reply["error"])
        return reply["ids"]

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
