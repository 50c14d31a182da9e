"""The mistral_common chat renderer process (``--tokenizer-mode mistral``).

    python -m frontend.tokenizers.mistral_worker TEKKEN_JSON

Reads length-prefixed msgpack requests on stdin (a conversation, tools and
vLLM's apply_chat_template flags) and answers ``{"ids": [...]}`` or
``{"error": message}`` on stdout, after a first ``{"version": ...}`` (or
``{"error": ...}`` when mistral_common cannot load the file). It renders as
vLLM 0.32's MistralTokenizer.apply_chat_template does (via transformers'
MistralCommonBackend): mistral_common's ChatCompletionRequest.from_openai and
encode_chat_completion, in its test validation mode. Runs only in its own
process: mistral_common brings pydantic and numpy.
"""

from __future__ import annotations

import sys
from typing import Any, BinaryIO

import msgspec


def _write(out: BinaryIO, message: dict[str, Any]) -> None:
    data = msgspec.msgpack.encode(message)
    out.write(len(data).to_bytes(4, "little") + data)
    out.flush()


def _render(tokenizer: Any, request: dict[str, Any]) -> list[int]:
    from mistral_common.protocol.instruct.request import ChatCompletionRequest

    messages = request["messages"]
    if request["add_generation_prompt"] and request["continue_final_message"]:
        raise ValueError(
            "Cannot set both `add_generation_prompt` and `continue_final_message` to True."
        )
    last_role = messages[-1].get("role") if messages else None
    if request["add_generation_prompt"] and last_role == "assistant":
        raise ValueError(
            "Cannot set `add_generation_prompt` to True when the last message is "
            "from the assistant. Consider using `continue_final_message` instead."
        )
    if request["continue_final_message"] and last_role != "assistant":
        raise ValueError(
            "Cannot set `continue_final_message` to True when the last message "
            "is not from the assistant."
        )
    kwargs = {}
    version = int(str(tokenizer.instruct_tokenizer.tokenizer.version.value).split("v")[-1])
    if version >= 15:
        kwargs["reasoning_effort"] = request.get("reasoning_effort")
    chat = ChatCompletionRequest.from_openai(
        messages=messages,
        tools=request.get("tools"),
        continue_final_message=request["continue_final_message"],
        **kwargs,
    )
    return list(tokenizer.encode_chat_completion(chat).tokens)


def main(argv: list[str]) -> int:
    out = sys.stdout.buffer
    inp = sys.stdin.buffer
    try:
        import mistral_common
        from mistral_common.protocol.instruct.validator import ValidationMode
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

        tokenizer = MistralTokenizer.from_file(argv[0], mode=ValidationMode.test)
    except Exception as e:  # missing package or a file it refuses: tell the frontend
        _write(out, {"error": f"mistral_common cannot load {argv[0]}: {type(e).__name__}: {e}"})
        return 1
    _write(out, {"version": f"mistral_common {mistral_common.__version__}"})
    decoder = msgspec.msgpack.Decoder()
    while header := inp.read(4):
        request = decoder.decode(inp.read(int.from_bytes(header, "little")))
        try:
            _write(out, {"ids": _render(tokenizer, request)})
        except Exception as e:  # vLLM turns every renderer failure into a 400
            _write(out, {"error": str(e) or type(e).__name__})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
