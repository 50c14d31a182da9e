"""Engine startup handshake (vLLM 0.32).

On the handshake ROUTER the engine sends HELLO, the frontend answers INIT with
the input/output addresses, and the engine later sends READY. On the input
ROUTER the engine's first message is its ready response (registration); only
after it may the frontend send anything there. HELLO/READY and the ready
response can arrive in either order.
"""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.errors import EngineVersionError, ProtocolError

SUPPORTED_VLLM_SERIES = "0.32"


class HandshakeStatus(msgspec.Struct):
    """HELLO / READY, e.g. ``{"status": "HELLO", "local": false, "headless": true}``."""

    status: str
    local: bool = False
    headless: bool = False
    parallel_config_hash: str | None = None


class EngineAddresses(msgspec.Struct):
    inputs: list[str]
    outputs: list[str]
    coordinator_input: str | None = None
    coordinator_output: str | None = None
    frontend_stats_publish_address: str | None = None


class HandshakeInit(msgspec.Struct):
    """INIT (``EngineHandshakeMetadata``); ``parallel_config`` is required."""

    addresses: EngineAddresses
    parallel_config: dict[str, Any] = {}


class ReadyResponse(msgspec.Struct, kw_only=True):
    """``EngineCoreReadyResponse``: post-initialisation facts about the engine."""

    max_model_len: int
    num_gpu_blocks: int = 0
    block_size: int = 0
    dp_stats_address: str | None = None
    dtype: str = ""
    vllm_version: str = ""
    world_size: int = 1
    data_parallel_size: int = 1
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    data_parallel_rank: int = 0
    max_num_seqs: int = 0
    max_num_batched_tokens: int = 0
    instance_id: str = ""
    supports_lora: bool = False
    max_loras: int = 0
    mamba_block_size: int | None = None
    kv_cache_size_tokens: int | None = None
    kv_cache_max_concurrency: float | None = None
    kv_events_config: dict[str, Any] | None = None
    weight_transfer_backend: str | None = None
    enable_sleep_mode: bool = False
    supports_draft_weight_updates: bool = False
    effective_attention_block_size: int | None = None


_status_decoder = msgspec.msgpack.Decoder(HandshakeStatus)
_init_decoder = msgspec.msgpack.Decoder(HandshakeInit)
_ready_decoder = msgspec.msgpack.Decoder(ReadyResponse)


def engine_identity(engine_index: int = 0) -> bytes:
    return engine_index.to_bytes(2, "little")


def decode_status(payload: bytes) -> HandshakeStatus:
    try:
        return _status_decoder.decode(payload)
    except msgspec.DecodeError as e:
        raise ProtocolError(f"bad handshake message from engine: {e}") from e


def encode_status(status: str, *, local: bool = False, headless: bool = True) -> bytes:
    return msgspec.msgpack.encode({"status": status, "local": local, "headless": headless})


def encode_init(inputs: list[str], outputs: list[str]) -> bytes:
    return msgspec.msgpack.encode(HandshakeInit(EngineAddresses(inputs=inputs, outputs=outputs)))


def decode_init(payload: bytes) -> HandshakeInit:
    return _init_decoder.decode(payload)


def decode_ready_response(payload: bytes) -> ReadyResponse | None:
    """The registration message; older engines sent ``b""`` (no information)."""
    if not payload:
        return None
    try:
        return _ready_decoder.decode(payload)
    except msgspec.DecodeError as e:
        raise ProtocolError(f"bad ready response from engine: {e}") from e


def encode_ready_response(ready: ReadyResponse) -> bytes:
    return msgspec.msgpack.encode(ready)


def check_engine_version(ready: ReadyResponse | None) -> None:
    """Refuse engines whose wire layout we do not implement (no negotiation exists)."""
    version = ready.vllm_version if ready else "<not reported>"
    if not version.startswith(SUPPORTED_VLLM_SERIES + "."):
        raise EngineVersionError(
            f"the engine runs vLLM {version}, but this frontend speaks the wire "
            f"protocol of vLLM {SUPPORTED_VLLM_SERIES}.x only; the positional message "
            f"layouts change between releases. Run vllm {SUPPORTED_VLLM_SERIES}.x "
            "on the engine side."
        )
