"""Cases of group g4's reasoning parser (kimi_k3) for the <think>-family
comparison of tests/test_reasoning_parsers.py: its marker tokens, the chat
template kwargs that switch its modes, and its own outputs."""

from __future__ import annotations

from tests.support.parser_diff import Case

OP, CL, SP = "<|open|>", "<|close|>", "<|sep|>"
THINK_OPEN, THINK_CLOSE = f"{OP}think{SP}", f"{CL}think{SP}"
RESPONSE_OPEN, RESPONSE_CLOSE = f"{OP}response{SP}", f"{CL}response{SP}"
MESSAGE_CLOSE = f"{CL}message{SP}"

TOKENS = {OP: True, CL: True, SP: True}
MODES = [None, {"thinking": False}, {"enable_thinking": False}, {"thinking": True}]
KIMI_K3 = [
    Case("k3-think", f"{THINK_OPEN}plan it{THINK_CLOSE}{RESPONSE_OPEN}The answer.{RESPONSE_CLOSE}"
         f"{MESSAGE_CLOSE}", tools=None),
    Case("k3-prefix-consumed", f"plan it{THINK_CLOSE}{RESPONSE_OPEN}answer{RESPONSE_CLOSE}",
         tools=None),
    Case("k3-response-only", f"{RESPONSE_OPEN}answer{RESPONSE_CLOSE}{MESSAGE_CLOSE}", tools=None),
    Case("k3-cut", f"{THINK_OPEN}still planning", tools=None),
    Case("k3-no-markers", "still planning", tools=None),
    Case("k3-unwrapped", f"plan{THINK_CLOSE}answer{RESPONSE_CLOSE}more", tools=None),
    Case("k3-response-unclosed", f"plan{THINK_CLOSE}{RESPONSE_OPEN}answer", tools=None),
    Case("k3-partial-close", f"plan {CL}thi", tools=None),
    Case("k3-partial-response", f"p{THINK_CLOSE}{RESPONSE_OPEN}ans{CL}respo", tools=None),
    Case("k3-spaced", f"{OP} think {SP}plan{CL} think {SP}{OP} response {SP}a{CL} response {SP}",
         tools=None),
    Case("k3-reopen", f"a{THINK_CLOSE}b{THINK_OPEN}c{THINK_CLOSE}d", tools=None),
    Case("k3-tools-kept", f"plan{THINK_CLOSE}{RESPONSE_OPEN}hi{RESPONSE_CLOSE}{OP}tools{SP}x"),
    Case("k3-tools-none", f"plan{THINK_CLOSE}{RESPONSE_OPEN}hi{RESPONSE_CLOSE}",
         tool_choice="none"),
    Case("k3-prompt-opened", f"plan{THINK_CLOSE}{RESPONSE_OPEN}a{RESPONSE_CLOSE}", tools=None,
         prompt_suffix=THINK_OPEN),
    Case("k3-no-reasoning-sent", f"{THINK_OPEN}plan{THINK_CLOSE}{RESPONSE_OPEN}a{RESPONSE_CLOSE}",
         tools=None, include_reasoning=False),
    Case("k3-no-reasoning-empty", f"plan{THINK_CLOSE}{RESPONSE_OPEN}{RESPONSE_CLOSE}",
         tools=None, include_reasoning=False),
    Case("k3-no-eos", f"p{THINK_CLOSE}{RESPONSE_OPEN}a{CL}", tools=None, eos=False),
    Case("k3-prompt-closed", f"{RESPONSE_OPEN}a{RESPONSE_CLOSE}", tools=None,
         prompt_suffix=f"{THINK_OPEN}x{THINK_CLOSE}"),
    Case("k3-prompt-old-turn", f"plan{THINK_CLOSE}a", tools=None,
         prompt_suffix=f"{THINK_OPEN}x{THINK_CLOSE}{THINK_OPEN}"),
]
