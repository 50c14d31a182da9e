"""vLLM 0.32's ``LoRARequest``: the adapter an ADD runs with, and ``add_lora``'s argument.

On the wire it is a positional array (``[name, int_id, path, base_model_name,
load_inplace, is_3d_lora_weight]``), element 6 of an ADD. The engine decodes it
with ``LoRARequest.__post_init__`` running in its input thread, outside any
error handler: an id below 1 or an empty path would kill that thread, so
:func:`check` refuses both before anything is encoded.
"""

from __future__ import annotations

import msgspec

from protocol.errors import ValidationError


class LoRARequest(msgspec.Struct, array_like=True, gc=False):
    """One adapter. The engine keys its adapter cache by ``lora_int_id``."""

    lora_name: str
    lora_int_id: int
    lora_path: str = ""
    base_model_name: str | None = None
    load_inplace: bool = False
    is_3d_lora_weight: bool = False


def check(lora: LoRARequest) -> None:
    """The rules of vLLM's ``LoRARequest.__post_init__`` (plus types msgspec checks)."""
    if type(lora.lora_int_id) is not int or lora.lora_int_id < 1:
        raise ValidationError(f"id must be > 0, got {lora.lora_int_id}")
    if not isinstance(lora.lora_path, str) or not lora.lora_path:
        raise ValidationError("lora_path cannot be empty")
    if not isinstance(lora.lora_name, str):
        raise ValidationError("lora_name must be a string")
