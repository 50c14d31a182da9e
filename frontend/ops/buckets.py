"""vLLM 0.32's histogram bucket bounds and ``--custom-histogram-buckets``.

The bounds of ``vllm/v1/metrics/buckets.py``, under vLLM's bucket-family keys
(the flag's keys); ``request_tokens`` depends on the engine's max_model_len.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

REQUEST_LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
TIME_TO_FIRST_TOKEN_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
INTER_TOKEN_LATENCY_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
REQUEST_PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
REQUEST_NUM_PREEMPTIONS_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
KV_CACHE_RESIDENCY_BUCKETS = (
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1,
    2,
    5,
    10,
    20,
    30,
    60,
    120,
    300,
    600,
    1200,
    1800,
)
BUCKET_FAMILIES = {
    "request_latency": REQUEST_LATENCY_BUCKETS,
    "time_to_first_token": TIME_TO_FIRST_TOKEN_BUCKETS,
    "inter_token_latency": INTER_TOKEN_LATENCY_BUCKETS,
    "iteration_tokens": ITERATION_TOKENS_BUCKETS,
    "request_params_n": REQUEST_PARAMS_N_BUCKETS,
    "request_num_preemptions": REQUEST_NUM_PREEMPTIONS_BUCKETS,
    "kv_cache_residency": KV_CACHE_RESIDENCY_BUCKETS,
    "request_tokens": None,
}


def request_token_buckets(max_model_len: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_model_len`` (vLLM's 1-2-5 series)."""
    bounds: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_model_len:
                return bounds
            bounds.append(value)
        exponent += 1


def bucket_bounds(
    max_model_len: int, overrides: dict[str, list[float]]
) -> dict[str, tuple[float, ...]]:
    """Every bucket family's bounds: vLLM's, with the flag's overrides."""
    # request_tokens, the one family without fixed bounds (None), is filled in here.
    defaults = cast(
        "dict[str, Sequence[float]]",
        {**BUCKET_FAMILIES, "request_tokens": request_token_buckets(max_model_len)},
    )
    return {
        family: tuple(float(b) for b in bounds)
        for family, bounds in {**defaults, **overrides}.items()
    }


def check_bucket_overrides(value: object) -> dict[str, list[float]]:
    """``--custom-histogram-buckets``, checked as vLLM checks it (its messages)."""
    if not isinstance(value, dict):
        raise ValueError(
            "custom_histogram_buckets: expected a JSON object mapping a "
            "bucket family to a list of bounds"
        )
    for family, bounds in value.items():
        if family not in BUCKET_FAMILIES:
            raise ValueError(
                f"custom_histogram_buckets: unknown bucket family {family!r}; "
                f"known families: {sorted(BUCKET_FAMILIES)}"
            )
        if not isinstance(bounds, list) or not bounds:
            raise ValueError(f"custom_histogram_buckets[{family!r}]: bucket list must not be empty")
        for bound in bounds:
            if isinstance(bound, bool) or not isinstance(bound, (int, float)):
                raise ValueError(
                    f"custom_histogram_buckets[{family!r}]: bound {bound!r} "
                    "must be a number, not a boolean"
                )
            if not math.isfinite(bound) or bound <= 0:
                raise ValueError(
                    f"custom_histogram_buckets[{family!r}]: bound {bound!r} "
                    "must be finite and greater than 0"
                )
        if any(a >= b for a, b in zip(bounds, bounds[1:])):
            raise ValueError(
                f"custom_histogram_buckets[{family!r}]: bounds {bounds} must be strictly increasing"
            )
    return value
