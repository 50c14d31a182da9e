"""vLLM's own answers for the real-engine tests.

    python -m tests.support.vllm_reference REQUESTS.json RESULTS.json

Runs ``vllm.LLM``, vLLM's complete Python stack (input processing with the
model's generation config, EngineCore, output processing), with the same model
and settings as the engines under test. A subprocess, so that the test process
never imports vllm and torch.

REQUESTS.json: ``{"llm": LLM(...) keyword arguments, "requests": [...]}``, each
request ``{"prompt_token_ids", "max_tokens", "logprobs", "prompt_logprobs"}``
and greedy. RESULTS.json: per request ``token_ids``, ``finish_reason``
("stop", "length"), ``stop_reason``, and ``logprobs`` / ``prompt_logprobs`` as
one ``{token id: [logprob, rank]}`` map per position (``None`` for the first
prompt position, or when not requested).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _logprob_maps(positions):
    if positions is None:
        return None
    return [None if entry is None else
            {str(token): [lp.logprob, lp.rank] for token, lp in entry.items()}
            for entry in positions]


def main(argv: list[str]) -> int:
    requests_path, results_path = argv
    from vllm import LLM, SamplingParams

    spec = json.loads(Path(requests_path).read_text())
    requests = spec["requests"]
    params = [SamplingParams(temperature=0.0, max_tokens=r["max_tokens"],
                             logprobs=r["logprobs"], prompt_logprobs=r["prompt_logprobs"])
              for r in requests]
    prompts = [{"prompt_token_ids": r["prompt_token_ids"]} for r in requests]
    results = []
    for out in LLM(**spec["llm"]).generate(prompts, params, use_tqdm=False):
        completion = out.outputs[0]
        results.append({
            "token_ids": list(completion.token_ids),
            "finish_reason": completion.finish_reason,
            "stop_reason": completion.stop_reason,
            "logprobs": _logprob_maps(completion.logprobs),
            "prompt_logprobs": _logprob_maps(out.prompt_logprobs),
        })
    Path(results_path).write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
