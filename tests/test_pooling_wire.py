"""Pooling on the wire and in the output encodings, against vLLM's own code.

* ``PoolingParams`` in an ADD: our bytes decode in vLLM's ``MsgpackDecoder``
  exactly as the engine's input thread decodes them (every field), vLLM's
  bytes decode with ours; what would kill the input thread is refused;
* ``pooling_output`` tensors vLLM's encoder writes (inline and out of band,
  float32/float16/bfloat16) decode with ours to the same values;
* the frontend's base64/bytes encodings equal vLLM's ``tensor2binary`` for
  every ``embed_dtype`` and byte order, Cohere's binary types equal vLLM's
  ``np.packbits`` version, and the bi-encoder cosine equals torch's.

Skipped without vLLM, except under CI=true (as tests/test_wire_compat.py).
"""

from __future__ import annotations

import math
import os
import random
import struct

import msgspec
import pytest

try:
    import torch
    import vllm
    from vllm.entrypoints.pooling.embed.protocol import _pack_binary_embeddings
    from vllm.pooling_params import PoolingParams as VPoolingParams
    from vllm.utils.serial_utils import tensor2binary
    from vllm.v1.engine import EngineCoreOutput as VOutput
    from vllm.v1.engine import EngineCoreOutputs as VOutputs
    from vllm.v1.engine import EngineCoreRequest as VRequest
    from vllm.v1.engine import FinishReason as VFinishReason
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder
except Exception as exc:
    _why = f"vLLM 0.32 is not importable ({type(exc).__name__}: {exc})"
    if os.environ.get("CI") == "true":
        pytest.fail(_why, pytrace=False)
    pytest.skip(_why, allow_module_level=True)

from frontend.pooling import vectors
from protocol import wire
from protocol.errors import ValidationError
from protocol.pooling import PoolingParams
from protocol.sampling import ModelLimits, SamplingParams

LIMITS = ModelLimits(vocab_size=1000, max_model_len=64, max_logprobs=20)
assert vllm.__version__.startswith("0.32.")


def request(params: PoolingParams | None, prompt=(1, 2, 3), sampling=None) -> wire.EngineCoreRequest:
    return wire.EngineCoreRequest("embd-1-0", list(prompt), None, sampling, params,
                                  1764403200.25, None, None, None, external_req_id="embd-1")


def vllm_decode(frames: list[bytes]) -> VRequest:
    return MsgpackDecoder(VRequest).decode(frames[1:])


def test_pooling_params_layout_is_vllms():
    ours = msgspec.structs.fields(PoolingParams)
    theirs = msgspec.structs.fields(VPoolingParams)
    assert [f.name for f in ours] == [f.name for f in theirs]
    for a, b in zip(ours, theirs):
        default = b.default.value if hasattr(b.default, "value") else b.default
        assert a.default == default, a.name
    assert PoolingParams.__struct_config__.array_like
    assert PoolingParams.__struct_config__.omit_defaults


@pytest.mark.parametrize("params", [
    PoolingParams(task="embed", use_activation=True, skip_reading_prefix_cache=False),
    PoolingParams(task="embed", use_activation=False, dimensions=16,
                  skip_reading_prefix_cache=False),
    PoolingParams(task="classify", use_activation=True, skip_reading_prefix_cache=False,
                  extra_kwargs={"compressed_token_type_ids": 5}),
    PoolingParams(task="token_embed", use_activation=True, skip_reading_prefix_cache=True),
    PoolingParams(task="token_classify", requires_token_ids=True, returned_token_ids=[3, 4],
                  step_tag_id=7),
])
def test_pooling_add_decodes_in_vllm(params):
    frames = wire.encode_add(request(params), LIMITS)
    theirs = vllm_decode(frames)
    assert theirs.sampling_params is None
    got = theirs.pooling_params
    for name in PoolingParams.__struct_fields__:
        value = getattr(got, name)
        assert getattr(value, "value", value) == getattr(params, name), name
    assert theirs.prompt_token_ids == [1, 2, 3]
    assert theirs.external_req_id == "embd-1"


def test_vllm_encoded_pooling_add_decodes_with_ours():
    theirs = VRequest("r-1", [4, 5], None, None,
                      VPoolingParams(task="classify", use_activation=False,
                                     extra_kwargs={"compressed_token_type_ids": 1}),
                      1.0, None, None, None)
    payload = MsgpackEncoder().encode(theirs)
    ours = wire.decode_add(payload[0])
    assert ours.pooling_params == PoolingParams(task="classify", use_activation=False,
                                                extra_kwargs={"compressed_token_type_ids": 1})


@pytest.mark.parametrize("params,why", [
    (PoolingParams(task="score"), "removed"),
    (PoolingParams(task="encode"), "removed"),
    (PoolingParams(task=None), "not one of"),
    (PoolingParams(task="embed", output_kind=1), "FINAL_ONLY"),
    (PoolingParams(task="embed", dimensions=0), "dimensions"),
])
def test_what_kills_the_input_thread_is_refused(params, why):
    with pytest.raises(ValidationError, match=why):
        wire.encode_add(request(params), LIMITS)
    if params.task in ("score", "encode") or params.output_kind != 2:
        # vLLM's decoder raises on these bytes: its input thread would die.
        raw = msgspec.msgpack.encode(request(params))
        with pytest.raises(Exception):
            MsgpackDecoder(VRequest).decode([raw])


def test_an_add_is_generation_or_pooling():
    with pytest.raises(ValidationError, match="either"):
        wire.encode_add(request(None), LIMITS)
    with pytest.raises(ValidationError, match="either"):
        wire.encode_add(request(PoolingParams(task="embed"),
                                sampling=SamplingParams(max_tokens=4)), LIMITS)


def test_a_pooling_prompt_may_fill_the_context():
    full = [5] * LIMITS.max_model_len
    wire.encode_add(request(PoolingParams(task="embed"), prompt=full), LIMITS)
    with pytest.raises(ValidationError, match="at least 1"):
        wire.encode_add(request(None, prompt=full, sampling=SamplingParams(max_tokens=4)),
                        LIMITS)
    with pytest.raises(ValidationError, match="maximum context length"):
        wire.encode_add(request(PoolingParams(task="embed"), prompt=full + [5]), LIMITS)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("size", [4, 64, 1024])
def test_vllm_pooling_outputs_decode_with_ours(dtype, size):
    values = torch.randn(size, generator=torch.Generator().manual_seed(size)).to(dtype)
    outs = VOutputs(engine_index=0, outputs=[
        VOutput("embd-1-0", [], pooling_output=values, finish_reason=VFinishReason.STOP),
        VOutput("embd-1-1", [], finish_reason=VFinishReason.ABORT)])
    frames = [bytes(b) for b in MsgpackEncoder().encode(outs)]
    assert (len(frames) > 1) == (values.nbytes >= 256)  # out of band from 256 bytes
    for decode in (wire.decode_outputs, wire.decode_step):
        ours = decode(frames)
        pooled = ours.outputs[0].pooling_output
        assert pooled.shape == [size]
        assert pooled.flat() == values.float().tolist()
        assert ours.outputs[0].finish_reason == wire.FinishReason.STOP
        assert ours.outputs[1].pooling_output is None


# ----------------------------------------------------------------- encodings

def sample_values() -> list[float]:
    rng = random.Random(7)
    values = [rng.gauss(0, 1) * 10 ** rng.randint(-12, 6) for _ in range(4000)]
    values += [0.0, -0.0, math.inf, -math.inf, math.nan, 65504.0, 65520.0, 1e-8, 448.0,
               464.0, 470.0, 480.0, 57344.0, 61440.0, 1e30]
    return [struct.unpack("<f", struct.pack("<f", v))[0] if math.isfinite(v) and
            abs(v) < 3e38 else v for v in values]


@pytest.mark.parametrize("embed_dtype", ["float32", "float16", "bfloat16", "fp8_e4m3",
                                         "fp8_e5m2"])
@pytest.mark.parametrize("endianness", ["native", "little", "big"])
def test_binary_encodings_equal_vllms(embed_dtype, endianness):
    values = sample_values()
    expected = tensor2binary(torch.tensor(values, dtype=torch.float32), embed_dtype, endianness)
    assert vectors.to_bytes(values, embed_dtype, endianness) == expected


def test_cohere_binary_types_equal_vllms():
    rows = torch.randn(3, 64, generator=torch.Generator().manual_seed(1)).tolist()
    for signed in (True, False):
        assert [vectors.packed_bits(r, signed) for r in rows] == \
            _pack_binary_embeddings(rows, signed)


def test_cosine_equals_torchs():
    gen = torch.Generator().manual_seed(3)
    for _ in range(50):
        a, b = torch.randn(64, generator=gen), torch.randn(64, generator=gen)
        theirs = torch.nn.functional.cosine_similarity(a, b, dim=0).item()
        ours = vectors.cosine(a.tolist(), b.tolist())
        assert abs(ours - theirs) <= 1e-6
    assert vectors.cosine([0.0] * 4, [1.0] * 4) == 0.0


def test_nested_is_tolist():
    t = torch.arange(6, dtype=torch.float32)
    assert vectors.nested(t.tolist(), [6]) == t.tolist()
    assert vectors.nested(t.tolist(), [2, 3]) == t.reshape(2, 3).tolist()
