"""``--tokenizer-mode``: which tokenizer vLLM 0.32 would load, as a fast tokenizer.

vLLM's modes (its tokenizer registry) and what this frontend does with them:

* ``hf`` (and ``auto`` when nothing else applies): transformers' tokenizer.
  ``tokenizer.json`` is loaded as is; without it a sentencepiece
  ``tokenizer.model`` is converted (:mod:`.sentencepiece`), and a tiktoken one
  (``tokenizer.model`` that is not sentencepiece, or ``tiktoken.model``) too
  (:mod:`.tiktoken`), once at start, as transformers 5 converts them;
* ``mistral`` (and ``auto`` for a Mistral-format repository: consolidated
  weights and ``tekken.json`` or ``tokenizer.model.v*``): see :mod:`.mistral`;
* the modes vLLM renders with its own Python code (``deepseek_v32``,
  ``deepseek_v4``, ``deepseek_v41``, ``inkling``, ``kimi_k3``, ``kimi_audio``,
  ``cohere``; ``auto`` picks some of them from the architecture): refused at
  start with a message, as is a mode vLLM does not know.
"""

from __future__ import annotations

import fnmatch
import logging
import pathlib
from collections.abc import Callable
from typing import Any

from tokenizers import Tokenizer

from frontend.tokenizers import sentencepiece, tiktoken
from frontend.tokenizers.loaded import LoadedTokenizer

log = logging.getLogger("frontend.tokenizers")

SERVED_MODES = ("auto", "hf", "mistral")
NOT_SERVED_MODES = (
    "cohere",
    "deepseek_v32",
    "deepseek_v4",
    "deepseek_v41",
    "inkling",
    "kimi_audio",
    "kimi_k3",
)
# vLLM's ModelConfig: tokenizer_mode "auto" for these architectures.
ARCHITECTURE_MODES = {
    "MoonshotKimiaForCausalLM": "kimi_audio",
    "KimiK3ForConditionalGeneration": "kimi_k3",
    "DeepseekV32ForCausalLM": "deepseek_v32",
    "DeepseekV4ForCausalLM": "deepseek_v4",
    "DeepseekV4ForConditionalGeneration": "deepseek_v4",
    "DeepseekV41ForCausalLM": "deepseek_v41",
    "InklingForCausalLM": "inkling",
    "InklingForConditionalGeneration": "inkling",
}


def resolve_mode(
    mode: str,
    tok_dir: pathlib.Path,
    model_config: dict[str, Any],
    repo_files: Callable[[], list[str]],
) -> str:
    """vLLM's choice of tokenizer mode. ``repo_files``: the repository's file
    names (a local directory's, or the Hub's listing; empty offline)."""
    mode = mode.lower()
    if mode not in SERVED_MODES + NOT_SERVED_MODES:
        raise ValueError(f"No tokenizer registered for tokenizer_mode={mode!r}.")
    if mode == "auto":
        architectures = model_config.get("architectures") or []
        mode = ARCHITECTURE_MODES.get(architectures[0] if architectures else "", "auto")
    if mode in NOT_SERVED_MODES:
        raise ValueError(
            f"tokenizer mode {mode!r}: vLLM renders this model's prompts with its own Python "
            "code, which this frontend does not implement (serve it with vLLM's own server)"
        )
    if mode == "auto":
        files = repo_files()
        mistral = any(
            fnmatch.fnmatch(pathlib.PurePath(f).name, "consolidated*.safetensors") for f in files
        ) and any(
            fnmatch.fnmatch(pathlib.PurePath(f).name, pattern)
            for f in files
            for pattern in ("tekken.json", "tokenizer.model.v*")
        )
        mode = "mistral" if mistral else "hf"
    return mode


def load(
    tok_dir: pathlib.Path,
    mode: str,
    *,
    tokenizer_config: dict[str, Any],
    model_type: str | None,
    trust_remote_code: bool,
) -> LoadedTokenizer:
    """The tokenizer of ``tok_dir`` in a resolved mode (``hf`` or ``mistral``).
    Raises ValueError/FileNotFoundError with a message for the command line."""
    if mode == "mistral":
        from frontend.tokenizers import mistral  # only for this mode

        return mistral.load(tok_dir)
    _check_remote_code(tok_dir, tokenizer_config, trust_remote_code)
    config = dict(tokenizer_config)
    tok_file = tok_dir / "tokenizer.json"
    if tok_file.exists():
        return LoadedTokenizer(Tokenizer.from_file(str(tok_file)), config, "tokenizer.json")
    for name in ("tokenizer.model", tiktoken.LEGACY_NAME):
        path = tok_dir / name
        if not path.exists():
            continue
        if name != tiktoken.LEGACY_NAME and sentencepiece.is_sentencepiece(path):
            tokenizer = sentencepiece.convert(path, config, model_type)
            for key, value in sentencepiece.special_tokens(path).items():
                config.setdefault(key, value)
            kind = "sentencepiece"
        else:
            tokenizer = tiktoken.convert(path, config)
            kind = "tiktoken"
        log.info(
            "converted the %s tokenizer %s to a fast tokenizer (%d tokens)",
            kind,
            path,
            tokenizer.get_vocab_size(with_added_tokens=True),
        )
        return LoadedTokenizer(tokenizer, config, f"{name} ({kind}, converted)")
    raise FileNotFoundError(
        f"{tok_dir}: no tokenizer.json, sentencepiece or tiktoken tokenizer.model: "
        "--model (or --tokenizer) must hold a Hugging Face tokenizer"
    )


def _check_remote_code(tok_dir: pathlib.Path, config: dict[str, Any], trusted: bool) -> None:
    """A tokenizer_config.json that names custom tokenizer code: vLLM refuses it
    without --trust-remote-code. With it, this frontend serves tokenizer.json
    (the code itself never runs here)."""
    auto_map = config.get("auto_map") or {}
    custom = auto_map.get("AutoTokenizer") if isinstance(auto_map, dict) else None
    if not custom:
        return
    if not trusted:
        raise ValueError(
            "Failed to load the tokenizer. If the tokenizer is a custom tokenizer not yet "
            "available in the HuggingFace transformers library, consider setting "
            "`trust_remote_code=True` in LLM or using the `--trust-remote-code` flag in the CLI."
        )
    if not (tok_dir / "tokenizer.json").exists():
        raise ValueError(
            f"{tok_dir}: the tokenizer is custom code ({custom}) without a "
            "tokenizer.json; this frontend does not run tokenizer code"
        )
    log.warning(
        "tokenizer_config.json names custom tokenizer code (%s): serving its "
        "tokenizer.json instead (--trust-remote-code)",
        custom,
    )
