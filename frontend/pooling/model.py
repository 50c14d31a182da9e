"""What a pooling model serves: the engine's tasks and the model's own config.

The engine reports its tasks (``get_supported_tasks``); the rest comes from the
model directory, read the way vLLM's ``ModelConfig`` reads it: the pooling
task that routes use (``get_pooling_task``), labels, Matryoshka dimensions,
whether scores are served (``enable_scoring_api``) and how (bi-encoder:
cosine of two embeddings; cross-encoder: one classified pair), the pair
separator, Cohere's task instructions.
"""

from __future__ import annotations

import json
import logging
import pathlib
from dataclasses import dataclass, field
from typing import Any

from frontend.model import ModelInfo
from frontend.state import AppState

log = logging.getLogger("frontend.pooling")

GENERATION_TASKS = ("generate", "transcription", "realtime")
FALLBACK_TASKS = ["generate"]
POOLING_TASKS = (
    "embed",
    "classify",
    "token_embed",
    "token_classify",
    "plugin",
    "embed&token_classify",
)
# vLLM's get_pooling_task: the first supported one.
POOLING_TASK_PRIORITY = (
    "embed&token_classify",
    "embed",
    "classify",
    "token_embed",
    "token_classify",
    "plugin",
)
SCORE_TYPES = {
    "embed": "bi-encoder",
    "classify": "cross-encoder",
    "token_embed": "late-interaction",
}
DEFAULT_NUM_LABELS = 2  # transformers' PretrainedConfig without id2label


def _read_json(path: pathlib.Path) -> dict[str, Any]:
    try:
        with path.open(encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


@dataclass
class PoolingModel:
    tasks: list[str]  # as the engine sent them (vLLM's messages show this list)
    pooling_task: str | None
    architecture: str = ""
    id2label: dict[int, str] = field(default_factory=dict)
    num_labels: int = DEFAULT_NUM_LABELS
    hidden_size: int = 0
    matryoshka_dimensions: list[int] | None = None
    is_matryoshka: bool = False
    embedding_size_override: int | None = None
    use_sep_token: bool = True
    task_instructions: dict[str, str] | None = None
    pad_token_id: int | None = None
    # --chat-template, which vLLM applies to query/document pairs (a score
    # template, e.g. Qwen3-Reranker's); the tokenizer's own template is not.
    score_template: bool = False

    @property
    def generates(self) -> bool:
        return any(t in GENERATION_TASKS for t in self.tasks)

    @property
    def pools(self) -> bool:
        return any(t in POOLING_TASKS for t in self.tasks)

    @property
    def embedding_size(self) -> int:
        return self.embedding_size_override or self.hidden_size

    @property
    def scoring(self) -> bool:
        """vLLM's enable_scoring_api: embeddings, or a one-label classifier."""
        if self.pooling_task in ("embed", "token_embed"):
            return True
        return self.pooling_task == "classify" and self.num_labels == 1

    @property
    def score_type(self) -> str | None:
        return SCORE_TYPES.get(self.pooling_task or "") if self.scoring else None


def pooling_task(tasks: list[str], architectures: list[str]) -> str | None:
    """vLLM's ModelConfig.get_pooling_task (no --pooler-config task here)."""
    if "token_classify" in tasks and any("ForTokenClassification" in a for a in architectures):
        return "token_classify"
    return next((t for t in POOLING_TASK_PRIORITY if t in tasks), None)


def load_pooling_model(model: ModelInfo, tasks: list[str] | tuple[str, ...]) -> PoolingModel:
    """The model's pooling facts, given the tasks its engine reported."""
    tasks = [str(t) for t in tasks]
    path = pathlib.Path(model.path)
    config = _read_json(path / "config.json")
    architectures = [str(a) for a in config.get("architectures") or []]
    id2label = {int(k): str(v) for k, v in (config.get("id2label") or {}).items()}
    if id2label:
        num_labels = len(id2label)
    else:
        num_labels = int(config.get("num_labels") or DEFAULT_NUM_LABELS)
        id2label = {i: f"LABEL_{i}" for i in range(num_labels)}
    instructions = config.get("task_instructions")
    if not isinstance(instructions, dict) or not instructions:
        prompts = _read_json(path / "config_sentence_transformers.json").get("prompts")
        instructions = prompts if isinstance(prompts, dict) and prompts else None
    use_sep = config.get("use_pad_token", config.get("use_sep_token", True))
    pad = model.tokenizer_config.get("pad_token")
    pad = pad.get("content") if isinstance(pad, dict) else pad
    return PoolingModel(
        tasks=tasks,
        pooling_task=pooling_task(tasks, architectures),
        architecture=architectures[0] if architectures else "",
        id2label=id2label,
        num_labels=num_labels,
        hidden_size=int((config.get("text_config") or config).get("hidden_size") or 0),
        matryoshka_dimensions=config.get("matryoshka_dimensions") or None,
        is_matryoshka=bool(
            config.get("matryoshka_dimensions") or config.get("is_matryoshka", False)
        ),
        embedding_size_override=config.get("embedding_size"),
        use_sep_token=bool(use_sep),
        task_instructions=(
            {str(k): v for k, v in instructions.items() if isinstance(v, str)}
            if instructions
            else None
        ),
        pad_token_id=model.tokenizer.token_to_id(pad) if isinstance(pad, str) else None,
        # (an empty template renders nothing: chat_template.build makes none of it)
        score_template=bool(model.chat_template)
        and model.chat_template != _own_chat_template(path, model.tokenizer_config),
    )


def _own_chat_template(path: pathlib.Path, tokenizer_config: dict[str, Any]) -> Any:
    """The model's own template (what the frontend reads without --chat-template)."""
    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template}
        template = named.get("default") or next(iter(named.values()), None)
    return template


async def engine_tasks(state: AppState) -> PoolingModel:
    """Ask the engine what it serves (as vLLM's API server does at start-up);
    a pooling model's prompts are truncated at their end (vLLM loads its
    tokenizer with ``truncation_side="right"``)."""
    try:
        tasks = await state.engine.call_utility("get_supported_tasks")
    except Exception as e:  # an engine that cannot say: vLLM's fallback
        log.warning("the engine did not report its tasks (%s); serving generation", e)
        tasks = FALLBACK_TASKS
    model = load_pooling_model(state.model, tasks)
    if model.pools:
        log.info("supported tasks: %s (pooling task %s)", model.tasks, model.pooling_task)
    if model.pools and not model.generates:
        state.renderer.truncation_side = "right"
    return model
