"""vLLM 0.32 EngineCore wire protocol: pure encode/decode, no sockets, no vllm/torch."""

from protocol.errors import EngineVersionError, ProtocolError, ValidationError
from protocol.handshake import ReadyResponse, check_engine_version
from protocol.pooling import PoolingParams
from protocol.sampling import ModelLimits, OutputKind, SamplingParams
from protocol.wire import (
    ENGINE_CORE_DEAD,
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    EngineDeadError,
    FinishReason,
    RequestType,
    decode_outputs,
    encode_abort,
    encode_add,
    encode_utility,
)

__all__ = [
    "ENGINE_CORE_DEAD",
    "EngineCoreOutput",
    "EngineCoreOutputs",
    "EngineCoreRequest",
    "EngineDeadError",
    "EngineVersionError",
    "FinishReason",
    "ModelLimits",
    "OutputKind",
    "PoolingParams",
    "ProtocolError",
    "ReadyResponse",
    "RequestType",
    "SamplingParams",
    "ValidationError",
    "check_engine_version",
    "decode_outputs",
    "encode_abort",
    "encode_add",
    "encode_utility",
]
