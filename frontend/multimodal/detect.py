"""Which models are multimodal, and which requests carry media."""

from __future__ import annotations

import json
import pathlib
from typing import Any

# A Hugging Face processor beside the tokenizer (image or audio preprocessing).
_PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
# Sub-configs of vision-language and audio-language models.
_MODALITY_CONFIGS = ("vision_config", "audio_config", "vision_tower", "mm_vision_tower")
# vLLM's media content-part types (chat_utils.MM_PARSER_MAP).
MEDIA_PARTS = frozenset(
    {
        "image_url",
        "input_image",
        "image_embeds",
        "image_pil",
        "audio_url",
        "input_audio",
        "audio_embeds",
        "video_url",
        "video_embeds",
    }
)


def is_multimodal(model_dir: str) -> bool:
    """A model directory with a processor config, or a config that names a
    vision or audio tower (vLLM asks its model registry; the frontend cannot)."""
    directory = pathlib.Path(model_dir)
    if any((directory / name).is_file() for name in _PROCESSOR_FILES):
        return True
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and any(key in config for key in _MODALITY_CONFIGS)


def has_media(messages: Any) -> bool:
    """Does any message have a media content part (by type or by key, as vLLM reads them)?"""
    if not isinstance(messages, list):
        return False
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            if isinstance(part, dict) and (
                part.get("type") in MEDIA_PARTS or MEDIA_PARTS.intersection(part)
            ):
                return True
    return False
