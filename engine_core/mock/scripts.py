"""Scripted output: a test states the token ids a request will produce.

Differential tests attach two frontends (ours and vLLM's) to one mock and need
both to see identical token streams, so a script is keyed by what both send
identically: the prompt token ids (both render the same chat template).
Script entries (control command ``script``, or a JSON list in ``--script FILE``):

* ``{"prompt_token_ids": [...], "output_token_ids": [...]}`` applies to every
  ADD whose prompt is exactly those ids;
* without ``prompt_token_ids`` it applies to every ADD that no keyed entry
  matches;
* ``"alternatives": [[...], [...]]`` instead of ``output_token_ids``: the ADDs
  that match take them in turn, in arrival order (so n>1 samples can differ;
  otherwise every sample gets the same tokens);
* ``"finish"``: what comes after the script when no stop rule ended the
  request first: ``"stop"`` (the default) the request's EOS, like a model that
  finished its answer (with ``ignore_eos`` that EOS does not stop it, and
  ordinary tokens follow); ``"length"``: ordinary tokens up to the length limit.

Entries stay until cleared; a later entry for the same prompt replaces the
earlier one. Scripted ids pass through the engine's stop rules exactly as
generated ids do (EOS, stop ids with their stop_reason, max_tokens and
max_model_len, repetition), get logprobs when asked, and come one step at a
time (``--tokens-per-step`` per step). Before ``min_tokens`` a scripted stop id
(EOS or any of the request's stop ids) is skipped, because vLLM's min-tokens
mask keeps the model from sampling it. Other sampling parameters (temperature,
seed, allowed_token_ids, ...) do not change scripted ids, and neither
``--eos-rate`` nor the mock's stop-token rule applies to a scripted request.
"""

from __future__ import annotations

from typing import Any

FINISHES = ("stop", "length")
FIELDS = {"prompt_token_ids", "output_token_ids", "alternatives", "finish"}


class Script:
    """One entry: its token lists (taken in turn) and whether EOS follows them."""

    __slots__ = ("alternatives", "eos", "uses")

    def __init__(self, alternatives: list[list[int]], eos: bool) -> None:
        self.alternatives = alternatives
        self.eos = eos
        self.uses = 0

    def take(self) -> tuple[list[int], bool]:
        tokens = self.alternatives[self.uses % len(self.alternatives)]
        self.uses += 1
        return tokens, self.eos


class Scripts:
    """The engine's scripts, looked up on every ADD."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.by_prompt: dict[tuple[int, ...], Script] = {}
        self.default: Script | None = None
        self.matched = 0  # ADDs that got a script

    def __len__(self) -> int:
        return len(self.by_prompt) + (self.default is not None)

    def add(self, entries: Any) -> int:
        """Add entries (all or none: a bad one raises ValueError); returns the count."""
        if not isinstance(entries, list):
            raise ValueError("scripts are a list of entries")
        parsed = [self._parse(entry) for entry in entries]
        for prompt, script in parsed:
            if prompt is None:
                self.default = script
            else:
                self.by_prompt[prompt] = script
        return len(self)

    def clear(self) -> None:
        self.by_prompt.clear()
        self.default = None

    def match(self, prompt: list[int]) -> tuple[list[int], bool] | None:
        """The output ids for this prompt and whether EOS follows, or None."""
        script = self.by_prompt.get(tuple(prompt), self.default) if self.by_prompt else self.default
        if script is None:
            return None
        self.matched += 1
        return script.take()

    def _parse(self, entry: Any) -> tuple[tuple[int, ...] | None, Script]:
        if not isinstance(entry, dict):
            raise ValueError(f"a script entry is a map, not {type(entry).__name__}")
        if unknown := set(entry) - FIELDS:
            raise ValueError(f"unknown script field(s): {', '.join(sorted(unknown))}")
        if ("output_token_ids" in entry) == ("alternatives" in entry):
            raise ValueError("a script entry has output_token_ids or alternatives")
        if "alternatives" in entry:
            alternatives = entry["alternatives"]
            if not isinstance(alternatives, list) or not alternatives:
                raise ValueError("alternatives: a non-empty list of token id lists")
        else:
            alternatives = [entry["output_token_ids"]]
        alternatives = [self._ids(ids, "output ids") for ids in alternatives]
        finish = entry.get("finish", "stop")
        if finish not in FINISHES:
            raise ValueError(f"finish: one of {', '.join(FINISHES)}, not {finish!r}")
        prompt = entry.get("prompt_token_ids")
        if prompt is not None:
            prompt = tuple(self._ids(prompt, "prompt_token_ids"))
            if not prompt:
                raise ValueError("prompt_token_ids: empty")
        return prompt, Script(alternatives, eos=finish == "stop")

    def _ids(self, ids: Any, what: str) -> list[int]:
        if not isinstance(ids, list) or not all(
            type(i) is int and 0 <= i < self.vocab_size for i in ids
        ):
            raise ValueError(f"{what}: a list of token ids in [0, {self.vocab_size})")
        return ids
