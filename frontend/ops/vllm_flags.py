"""Every ``vllm serve`` flag, accepted: those the frontend does not act on are recorded.

The table of vLLM's flags (``vllm_serve_flags.FLAGS``, generated from vLLM's
own parser) is added to the frontend's parser after the frontend's own flags:
each flag the frontend does not define itself is parsed with vLLM's value
type and choices (so a bad value exits 2 as with ``vllm serve``) and kept in
:class:`RecordedFlags`, by vLLM's ``dest`` name. Engine flags
(``--gpu-memory-utilization``, ``--max-model-len`` ...) belong to the engine
process, which gets its own command line; the frontend lists them once at
start and uses them where it reports engine settings
(:meth:`RecordedFlags.cache_config`). API-server flags of vLLM that this
frontend does not implement are recorded too and named in a warning.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from frontend.ops.vllm_serve_flags import FLAGS

# The namespace attribute of a recorded flag: vLLM's dest behind a prefix that
# no frontend flag uses.
_PREFIX = "vllm:"

# vLLM's CacheConfig fields that engine flags set (EngineArgs.create_engine_config);
# the one renamed: --kv-cache-dtype is CacheConfig.cache_dtype.
_CACHE_CONFIG_FIELDS = {
    "block_size": "block_size",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "kv_cache_dtype": "cache_dtype",
    "num_gpu_blocks_override": "num_gpu_blocks_override",
    "enable_prefix_caching": "enable_prefix_caching",
    "prefix_caching_hash_algo": "prefix_caching_hash_algo",
    "prefix_cache_retention_interval": "prefix_cache_retention_interval",
    "kv_cache_dtype_skip_layers": "kv_cache_dtype_skip_layers",
    "kv_sharing_fast_prefill": "kv_sharing_fast_prefill",
    "swa_bounded_replay": "swa_bounded_replay",
    "mamba_cache_dtype": "mamba_cache_dtype",
    "mamba_ssm_cache_dtype": "mamba_ssm_cache_dtype",
    "mamba_block_size": "mamba_block_size",
    "prefix_match_unit": "prefix_match_unit",
    "mamba_cache_mode": "mamba_cache_mode",
    "enable_mamba_shared_prefix_checkpoint": "enable_mamba_shared_prefix_checkpoint",
    "replayssm_buffer_len": "replayssm_buffer_len",
    "use_replayssm": "use_replayssm",
    "kv_offloading_size": "kv_offloading_size",
    "kv_offloading_backend": "kv_offloading_backend",
}


@dataclass(frozen=True)
class RecordedFlags:
    """The ``vllm serve`` flags given that the frontend does not act on, by
    vLLM's dest name, with vLLM's parsed values (``True``/``False`` for
    switches, numbers, JSON objects, lists, strings)."""

    engine: dict[str, Any] = field(default_factory=dict)
    # vLLM API-server flags this frontend does not implement.
    server: dict[str, Any] = field(default_factory=dict)

    def cache_config(self) -> dict[str, Any]:
        """The vLLM CacheConfig fields these engine flags set, by field name
        (``vllm:cache_config_info`` labels are ``str()`` of these values)."""
        return {
            name: self.engine[dest]
            for dest, name in _CACHE_CONFIG_FIELDS.items()
            if dest in self.engine
        }

    @staticmethod
    def describe(values: dict[str, Any]) -> str:
        """``--gpu-memory-utilization 0.9 --enforce-eager`` for a log line."""
        parts = []
        for dest, value in values.items():
            flag = "--" + dest.replace("_", "-")
            if value is True:
                parts.append(flag)
            elif value is False:
                parts.append(f"--no-{dest.replace('_', '-')}")
            else:
                shown = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
                parts.append(f"{flag} {shown}")
        return " ".join(parts)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every vLLM flag the parser does not define yet (call it last)."""
    known = parser._option_string_actions
    group = parser.add_argument_group(
        "other vllm serve flags",
        "Every other flag of `vllm serve` is accepted with vLLM's value checks and "
        "recorded: engine flags are the engine's (start it with them) and are listed "
        "once at start-up; see the README (Drop-in for `vllm serve`).",
    )
    for options, dest, _scope, action, nargs, value_type, choices in FLAGS:
        defined = [o for o in options if o in known]
        if defined:
            if len(defined) != len(options):
                raise AssertionError(
                    f"the frontend defines {defined} but not all of vLLM's {list(options)}"
                )
            continue
        kwargs: dict[str, Any] = {
            "dest": _PREFIX + dest,
            "default": argparse.SUPPRESS,
            "help": argparse.SUPPRESS,
        }
        if action == "store_true":
            kwargs["action"] = "store_true"
        elif action == "bool":
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = converter(value_type)
            if action == "append":
                kwargs["action"] = "append"
            if nargs is not None:
                kwargs["nargs"] = nargs
                if nargs == "?":
                    kwargs["const"] = True  # vLLM: a bare optional-valued flag is True
            if choices:
                kwargs["choices"] = list(choices) + ([None] if value_type.endswith("?") else [])
        group.add_argument(*options, **kwargs)


def recorded(args: argparse.Namespace) -> RecordedFlags:
    """The recorded flags of parsed arguments, engine and server apart."""
    scope = {dest: s for _, dest, s, *_ in FLAGS}
    engine: dict[str, Any] = {}
    server: dict[str, Any] = {}
    for name, value in vars(args).items():
        if name.startswith(_PREFIX):
            dest = name[len(_PREFIX) :]
            (server if scope[dest] == "server" else engine)[dest] = value
    return RecordedFlags(engine=engine, server=server)


# ------------------------------------------------------------ vLLM's value types
def human_readable_int(value: str) -> int:
    """vLLM's: ``25.6k`` = 25600 (decimal k/m/g/t), ``1K`` = 1024 (binary K/M/G/T)."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        number, suffix = match.groups()
        if suffix in "kmgt":
            return int(float(number) * 10 ** (3 * ("kmgt".index(suffix) + 1)))
        if "." in number:
            raise argparse.ArgumentTypeError(
                f"Decimals are not allowed with binary suffixes like {suffix}. Did you mean "
                f"to use {number}{suffix.lower()} instead?"
            )
        return int(number) * 2 ** (10 * ("KMGT".index(suffix) + 1))
    return int(value)


def _human_int_or_auto(value: str) -> int:
    value = value.strip()
    return -1 if value == "-1" or value.lower() == "auto" else human_readable_int(value)


def _json(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {e}") from None


def _dict_or_str(value: str) -> Any:
    if not re.match(r"(?s)^\s*{.*}\s*$", value):
        return value
    return None if value in ("", "None") else _json(value)


def _int_or_str_list(value: str) -> list[int | str]:
    return [int(p) if p.isdigit() else p for p in (part.strip() for part in value.split(","))]


_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "json": _json,
    "dict_or_str": _dict_or_str,
    "human_int": human_readable_int,
    "human_int_or_auto": _human_int_or_auto,
    "snake": lambda s: s.lower().replace("-", "_"),
    "int_or_str_list": _int_or_str_list,
}


def converter(value_type: str) -> Callable[[str], Any]:
    """The argparse ``type=`` for a table value type (``int?``: also ``None``)."""
    base = _CONVERTERS[value_type.rstrip("?")]
    if not value_type.endswith("?"):
        return _named(base, value_type)

    def optional(text: str) -> Any:
        return None if text in ("", "None") else base(text)

    return _named(optional, value_type)


def _named(fn: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """argparse names the type in its error message ("invalid int value")."""
    if fn in (int, float, str):
        return fn

    def convert(text: str) -> Any:
        try:
            return fn(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"invalid {name} value: {text!r} ({e})") from None

    return convert
