"""What the frontend knows about the served model, read from its HF directory.

The engine never sends the tokenizer, the chat template or the generation
config, so the frontend reads them itself with the ``tokenizers`` library
(no transformers): the tokenizer (``frontend.tokenizers``: ``tokenizer.json``
or a converted one), ``tokenizer_config.json``, ``config.json``,
``generation_config.json`` and an optional ``chat_template.jinja``, from a
local directory or a Hub id's snapshot in the Hugging Face cache
(``frontend.hub``).
"""

from __future__ import annotations

import json
import logging
import pathlib
from dataclasses import dataclass, field
from typing import Any

from tokenizers import Tokenizer

from frontend import hub
from frontend import tokenizers as tokenizer_modes
from frontend.bytelevel import ByteLevelTexts, is_byte_level
from frontend.tokenizers.ascii_bytelevel import AsciiByteLevelEncoder

log = logging.getLogger("frontend.model")

# generation_config.json keys that become server-side sampling defaults, as
# vLLM's `--generation-config auto` does (ModelConfig.get_diff_sampling_param).
_GENERATION_DEFAULT_KEYS = {
    "repetition_penalty": "repetition_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "max_new_tokens": "max_tokens",
}

# transformers' clean_up_tokenization (applied when the tokenizer config asks).
_CLEANUP = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)


def _read_json(path: pathlib.Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    with path.open(encoding="utf-8") as f:
        return json.load(f)


def _token_content(value: Any) -> str | None:
    """tokenizer_config tokens are either strings or AddedToken dicts."""
    if isinstance(value, dict):
        return value.get("content")
    return value


@dataclass(frozen=True)
class ModelSource:
    """vLLM's flags for where the tokenizer and configs come from and how they
    are read (--tokenizer-mode, --revision, --generation-config, ...)."""

    tokenizer_mode: str = "auto"
    revision: str | None = None
    tokenizer_revision: str | None = None  # default: revision
    hub: hub.HubOptions = hub.HubOptions()
    trust_remote_code: bool = False
    generation_config: str = "auto"  # auto | vllm | a directory
    override_generation_config: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelInfo:
    path: str  # --model as given (a directory or a Hub id)
    served_names: list[str]
    tokenizer: Tokenizer
    vocab_size: int
    bos_token: str | None
    eos_token: str | None
    bos_token_id: int | None
    eos_token_id: int | None
    generation_eos_ids: list[int]
    default_sampling: dict[str, Any]
    chat_template: str | None
    clean_up_tokenization_spaces: bool
    added_token_ids: dict[int, str] = field(default_factory=dict)
    special_token_ids: frozenset[int] = frozenset()
    max_chars_per_token: int = 1
    max_token_id: int | None = None  # the highest id the tokenizer can produce
    tokenizer_config: dict[str, Any] = field(default_factory=dict)
    # Set for byte-level BPE tokenizers: the fast incremental decoder's tables.
    byte_level: ByteLevelTexts | None = None
    # The Metaspace replacement ("▁") of sentencepiece-style tokenizers, whose
    # single-token decode drops a leading space (vLLM restores it in logprobs).
    space_marker: str | None = None
    directory: str = ""  # where its files were read (a Hub id's cache snapshot)
    # Mixture of experts (vLLM's ModelConfig.is_moe): data parallel needs waves.
    num_experts: int = 0
    # config.json's first architecture (vLLM's ModelConfig.architecture).
    architecture: str = ""
    # vLLM's override_max_tokens: a cap on every request's max_tokens from
    # --generation-config DIR or --override-generation-config max_new_tokens.
    override_max_tokens: int | None = None
    tokenizer_mode: str = "hf"
    # Set for tokenizers that render chat prompts themselves (--tokenizer-mode mistral).
    render_chat: Any = None
    # Set for GPT-2-style byte-level BPE: encodes ASCII text without the tokenizer.
    ascii_encoder: AsciiByteLevelEncoder | None = None

    @property
    def name(self) -> str:
        return self.served_names[0]

    # -- tokenizer helpers with Hugging Face semantics ----------------------
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if self.ascii_encoder is not None:
            ids = self.ascii_encoder.encode(text, add_special_tokens)
            if ids is not None:
                return ids
        # The same ids as encode(); the batch "fast" form skips computing
        # character offsets, a fifth of tokenization's cost.
        return self.tokenizer.encode_batch_fast([text], add_special_tokens=add_special_tokens)[
            0
        ].ids

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[list[int]]:
        if self.ascii_encoder is not None:
            return [self.encode(t, add_special_tokens) for t in texts]
        encs = self.tokenizer.encode_batch_fast(texts, add_special_tokens=add_special_tokens)
        return [e.ids for e in encs]

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        text = self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
        if self.clean_up_tokenization_spaces:
            for old, new in _CLEANUP:
                text = text.replace(old, new)
        return text

    def id_to_token(self, token_id: int) -> str | None:
        return self.tokenizer.id_to_token(token_id)


def load_model_info(
    model: str,
    *,
    tokenizer_dir: str | None = None,
    served_names: list[str] | None = None,
    chat_template_path: str | None = None,
    source: ModelSource = ModelSource(),
) -> ModelInfo:
    """Load tokenizer and configs from a local Hugging Face model directory or a
    Hub id (resolved through the Hugging Face cache, as vLLM resolves it)."""
    model_dir = hub.resolve(model, source.revision, source.hub)
    tok_name = tokenizer_dir or model
    tok_revision = source.tokenizer_revision or source.revision
    tok_dir = (
        model_dir
        if tok_name == model and tok_revision == source.revision
        else hub.resolve(tok_name, tok_revision, source.hub)
    )
    config = _read_json(model_dir / "config.json")
    text_config = config.get("text_config") or config
    mode = tokenizer_modes.resolve_mode(
        source.tokenizer_mode,
        tok_dir,
        config,
        lambda: hub.repo_files(tok_name, tok_revision, source.hub),
    )
    loaded = tokenizer_modes.load(
        tok_dir,
        mode,
        tokenizer_config=_read_json(tok_dir / "tokenizer_config.json"),
        model_type=config.get("model_type"),
        trust_remote_code=source.trust_remote_code,
    )
    log.info("tokenizer: %s from %s (tokenizer mode %s)", loaded.source, tok_dir, mode)
    tokenizer = loaded.tokenizer
    tok_config = loaded.config
    gen_config = _generation_config(model_dir, config, source)
    defaults = _sampling_defaults(gen_config, source)

    bos_token = _token_content(tok_config.get("bos_token"))
    eos_token = _token_content(tok_config.get("eos_token"))
    bos_id = tokenizer.token_to_id(bos_token) if bos_token else None
    eos_id = tokenizer.token_to_id(eos_token) if eos_token else None
    if eos_id is None:
        eos_id = _first_int(text_config.get("eos_token_id"))
    if bos_id is None:
        bos_id = _first_int(text_config.get("bos_token_id"))

    gen_eos = gen_config.get("eos_token_id")
    generation_eos_ids = [gen_eos] if isinstance(gen_eos, int) else list(gen_eos or [])

    added = {i: tok.content for i, tok in tokenizer.get_added_tokens_decoder().items()}
    special = (
        loaded.skip_ids
        if loaded.skip_ids is not None
        else frozenset(i for i, tok in tokenizer.get_added_tokens_decoder().items() if tok.special)
    )
    vocab_size = int(text_config.get("vocab_size") or tokenizer.get_vocab_size(True))

    info = ModelInfo(
        path=str(model),  # as given: /v1/models' root is vLLM's --model
        directory=str(model_dir),
        served_names=served_names or [str(model)],
        tokenizer=tokenizer,
        vocab_size=vocab_size,
        bos_token=bos_token,
        eos_token=eos_token,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        generation_eos_ids=generation_eos_ids,
        default_sampling=defaults,
        chat_template=(
            tok_config["chat_template"]
            if loaded.render_chat is not None
            else _load_chat_template(tok_dir, tok_config, chat_template_path)
        ),
        clean_up_tokenization_spaces=bool(tok_config.get("clean_up_tokenization_spaces", False)),
        added_token_ids=added,
        special_token_ids=special,
        tokenizer_config=tok_config,
        num_experts=_num_experts(text_config),
        architecture=str((config.get("architectures") or [""])[0]),
        override_max_tokens=(
            defaults.get("max_tokens")
            if source.generation_config not in ("auto", "vllm")
            else source.override_generation_config.get("max_new_tokens")
        ),
        tokenizer_mode=mode,
        render_chat=loaded.render_chat,
    )
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    info.max_chars_per_token = max(map(len, vocab), default=1)
    info.max_token_id = max(vocab.values(), default=None)
    if is_byte_level(tokenizer):
        info.byte_level = ByteLevelTexts(tokenizer, special)
    info.ascii_encoder = AsciiByteLevelEncoder.for_tokenizer(tokenizer)
    info.space_marker = _space_marker(tokenizer)
    if info.default_sampling and source.generation_config != "vllm":
        log.warning(
            "Default vLLM sampling parameters have been overridden by %s: `%s`. If "
            "this is not intended, please relaunch with `--generation-config vllm`.",
            "the model's `generation_config.json`"
            if source.generation_config == "auto"
            else source.generation_config,
            info.default_sampling,
        )
    return info


def _generation_config(
    model_dir: pathlib.Path, config: dict[str, Any], source: ModelSource
) -> dict[str, Any]:
    """vLLM's try_get_generation_config: the model's generation_config.json (for
    ``auto`` and ``vllm``: its EOS ids count either way) or the directory's,
    else the generation fields of the config.json beside it."""
    where = (
        model_dir
        if source.generation_config in ("auto", "vllm")
        else pathlib.Path(source.generation_config)
    )
    if source.generation_config not in ("auto", "vllm") and not where.is_dir():
        raise FileNotFoundError(
            f"--generation-config {source.generation_config}: not auto, vllm or a directory"
        )
    if (where / "generation_config.json").exists():
        return _read_json(where / "generation_config.json")
    fallback = config if where == model_dir else _read_json(where / "config.json")
    return {
        k: v for k, v in fallback.items() if k in _GENERATION_DEFAULT_KEYS or k == "eos_token_id"
    }


def _sampling_defaults(gen_config: dict[str, Any], source: ModelSource) -> dict[str, Any]:
    """vLLM's get_diff_sampling_param: the generation config's sampling fields
    (none for ``--generation-config vllm``), --override-generation-config over them."""
    merged = {} if source.generation_config == "vllm" else dict(gen_config)
    merged.update(source.override_generation_config)
    return {
        dst: merged[src]
        for src, dst in _GENERATION_DEFAULT_KEYS.items()
        if merged.get(src) is not None
    }


def _space_marker(tokenizer: Tokenizer) -> str | None:
    """vLLM's get_leading_space_marker: a Metaspace pre-tokenizer's replacement
    (on its own or in a Sequence), else None."""
    pre = tokenizer.pre_tokenizer
    if pre is None:
        return None
    spec = json.loads(pre.__getstate__())
    for part in [spec, *(spec.get("pretokenizers") or [])]:
        if part.get("type") == "Metaspace":
            return part.get("replacement", "▁")
    return None


def _num_experts(config: dict[str, Any]) -> int:
    """vLLM's get_num_experts: the first expert count the config names, else the
    largest of its MoE blocks (heterogeneous models)."""
    for key in ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts"):
        value = config.get(key)
        if value:
            return int(value[0] if isinstance(value, list) else value)
    return max(
        (
            int(b.get("n_routed_experts") or 0)
            for b in config.get("block_configs") or []
            if isinstance(b, dict) and b.get("block_type") == "moe"
        ),
        default=0,
    )


def _first_int(value: Any) -> int | None:
    if isinstance(value, list):
        return value[0] if value else None
    return value if isinstance(value, int) else None


def _load_chat_template(
    tok_dir: pathlib.Path, tok_config: dict[str, Any], override: str | None
) -> str | None:
    """``--chat-template`` (a file or an inline template) wins over the model's."""
    if override:
        path = pathlib.Path(override)
        if path.exists():
            return path.read_text(encoding="utf-8")
        if any(c in override for c in "{}\n"):
            return override
        raise FileNotFoundError(f"--chat-template {override!r}: no such file")
    jinja_file = tok_dir / "chat_template.jinja"
    if jinja_file.exists():
        return jinja_file.read_text(encoding="utf-8")
    template = tok_config.get("chat_template")
    if isinstance(template, list):  # named templates: take "default"
        named = {t.get("name"): t.get("template") for t in template}
        template = named.get("default") or next(iter(named.values()), None)
    return template
