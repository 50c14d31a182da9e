"""A command line as ``vllm serve`` reads it, rewritten for plain argparse.

vLLM's parser (``FlexibleArgumentParser``) accepts more than argparse does, and
copied ``vllm serve`` lines and config files rely on it:

* ``serve`` first (``frontend serve MODEL ...``, as ``vllm serve MODEL ...``);
* ``--config FILE.yaml``: the file's keys become flags (flat or nested, see
  :func:`config_file_args`), placed before the command line's own flags so
  that those win;
* ``--max_model_len`` is ``--max-model-len`` (underscores in a flag's name);
* ``-O3`` / ``-O 3`` / ``-O=3`` is ``--optimization-level 3``;
* ``--json-arg.key value`` and ``--json-arg.list+ a,b`` build the JSON object
  of ``--json-arg`` (values parsed as JSON, else kept as text).

:func:`rewrite` does what ``FlexibleArgumentParser.parse_args`` does before
argparse sees the arguments, in the same order and with the same messages.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from frontend.ops.vllm_flags import human_readable_int

_MODEL_FLAG = re.compile(r"^--model(=.+|$)")
_SERVED_NAME = re.compile(r"^--served[-_]model[-_]name(=.+|$)")
_CONFIG_FLAG = re.compile(r"^--config(=.+|$)")
# Everything between the leading -- and the first '.'.
_FLAG_NAME = re.compile(r"(?<=--)[^.]*")


def rewrite(argv: list[str], known_options: Iterable[str]) -> list[str]:
    """``argv`` (without the program name) as vLLM's parser would hand it to
    argparse. ``known_options``: the option strings of the parser that reads
    the result (a dotted option it knows itself is left alone). Raises
    ValueError with vLLM's message for a command line vLLM refuses."""
    known = set(known_options)
    args = list(argv)
    serve = bool(args) and args[0] == "serve"
    if serve:
        args = _serve_positional_model(args)
    if "--config" in args:
        args = _pull_config(args, known, serve)
    if serve:
        args = args[1:]
    return _merge_dotted(_normalize_names(args), known)


def _serve_positional_model(args: list[str]) -> list[str]:
    """``vllm serve ... --model M ...`` -> ``serve M ...`` (vLLM moves it to the
    front), and vLLM's refusal of ``--served-model-name`` without a model."""
    index = next((i for i, a in enumerate(args) if _MODEL_FLAG.match(a)), None)
    if index is not None:
        if args[index] == "--model":
            if index + 1 >= len(args):
                raise ValueError("argument --model: expected one argument")
            model, rest = args[index + 1], index + 2
        else:
            model, rest = args[index].removeprefix("--model="), index + 1
        args = ["serve", model, *args[1:index], *args[rest:]]
    if (
        len(args) > 1
        and args[1].startswith("-")
        and not any(_CONFIG_FLAG.match(a) for a in args)
        and any(_SERVED_NAME.match(a) for a in args)
    ):
        raise ValueError(
            "`model` should be provided as the first positional argument when "
            "using `vllm serve`. i.e. `vllm serve <model> --<arg> <value>`."
        )
    return args


def _pull_config(args: list[str], known: set[str], serve: bool) -> list[str]:
    """The config file's flags go after the subcommand and the positional model
    and before every other argument (precedence: command line > file > defaults)."""
    if args.count("--config") > 1:
        raise ValueError("More than one config file specified!")
    index = args.index("--config")
    if index == len(args) - 1:
        raise ValueError("No config file specified! Please check your command-line arguments.")
    config_args = config_file_args(args[index + 1], known)
    rest = args[:index] + args[index + 2 :]
    if not serve:  # (after a leading positional model, as after `serve MODEL`)
        head = 1 if rest and not rest[0].startswith("-") else 0
        return rest[:head] + config_args + rest[head:]
    model_in_cli = len(rest) > 1 and not rest[1].startswith("-")
    if not model_in_cli and "--model" not in config_args:
        raise ValueError(
            "No model specified! Please specify model either as a positional "
            "argument or in a config file."
        )
    head = 2 if model_in_cli else 1
    return rest[:head] + config_args + rest[head:]


def config_file_args(path: str, known: set[str]) -> list[str]:
    """A YAML config file as flags, as vLLM reads it: ``key: value`` is
    ``--key value``; ``true`` is ``--key`` and ``false`` ``--no-key`` (when that
    flag exists, else nothing); a list is ``--key item ...``; a mapping is
    ``--key '<JSON>'``."""
    extension = path.split(".")[-1]
    if extension not in ("yaml", "yml"):
        raise ValueError(f"Config file must be of a yaml/yml type. {extension} supplied")
    import yaml  # only for --config: not on the start-up path otherwise

    try:
        with open(path, encoding="utf-8") as f:
            config = yaml.safe_load(f)
    except OSError as e:
        raise ValueError(f"Unable to read the config file at {path}: {e}") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: the config file must be a mapping of flag names to values")
    out: list[str] = []
    for key, value in config.items():
        if isinstance(value, bool):
            if value:
                out.append(f"--{key}")
            elif f"--no-{key}" in known:
                out.append(f"--no-{key}")
        elif isinstance(value, list):
            if value:
                out += [f"--{key}", *(str(item) for item in value)]
        elif isinstance(value, dict):
            out += [f"--{key}", json.dumps(value)]
        else:
            out += [f"--{key}", str(value)]
    return out


def _normalize_names(args: list[str]) -> list[str]:
    """Underscores to dashes in flag names; ``-O`` forms to --optimization-level."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            key, eq, value = arg.partition("=")
            key = _FLAG_NAME.sub(lambda m: m.group(0).replace("_", "-"), key, count=1)
            out.append(f"{key}{eq}{value}")
        elif arg.startswith("-O") and arg != "-O":
            out += ["--optimization-level", arg[3:] if arg[2] == "=" else arg[2:]]
        elif arg == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"}:
            out.append("--optimization-level")
        else:
            out.append(arg)
    return out


def _merge_dotted(args: list[str], known: set[str]) -> list[str]:
    """``--x.a 1 --x.b.c two`` -> ``--x '{"a": 1, "b": {"c": "two"}}'`` (at the end)."""
    delete: set[int] = set()
    merged: dict[str, dict[str, Any]] = defaultdict(dict)
    for i, arg in enumerate(args):
        if i in delete or not arg.startswith("-") or "." not in arg:
            continue
        name, eq, value = arg.partition("=")
        if "." not in name or name in known:
            continue  # the dot was in the value, or the parser has the dotted flag itself
        if not eq:
            if i + 1 >= len(args):
                raise ValueError(f"argument {name}: expected one argument")
            value = args[i + 1]
            delete.add(i + 1)
        if name.endswith("+"):
            name, value = name[:-1], json.dumps(value.split(","))
        key, *path = name.split(".")
        _deep_update(merged[key], _nested(path, _dotted_value(value)))
        delete.add(i)
    out = [a for i, a in enumerate(args) if i not in delete]
    for key, tree in merged.items():
        out += [key, json.dumps(tree)]
    return out


def _dotted_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        try:
            return human_readable_int(text)
        except (ValueError, argparse.ArgumentTypeError):
            return text


def _nested(keys: list[str], value: Any) -> Any:
    for key in reversed(keys):
        value = {key: value}
    return value


def _deep_update(original: dict[str, Any], update: dict[str, Any]) -> None:
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(original.get(k), dict):
            _deep_update(original[k], v)
        elif isinstance(v, list) and isinstance(original.get(k), list):
            original[k] += v
        else:
            original[k] = v
