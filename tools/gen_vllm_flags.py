"""Write ``frontend/ops/vllm_serve_flags.py``: the flags of vLLM's own ``vllm serve`` parser.

Usage (with vLLM installed, e.g. in the project's virtualenv)::

    python -m tools.gen_vllm_flags            # rewrite the table
    python -m tools.gen_vllm_flags --check    # exit 1 if it differs from vLLM's

The frontend never imports vLLM, so it keeps its own copy of vLLM's flag list,
generated here from vLLM's parser (``make_arg_parser``). The frontend accepts
every flag of the table; tests/test_vllm_flags.py regenerates the table from
the installed vLLM and fails when they differ, so a flag added by a later vLLM
shows up as a failing test until the table is generated again.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TARGET = ROOT / "frontend" / "ops" / "vllm_serve_flags.py"

HEADER = '''"""vLLM {version}'s ``vllm serve`` flags, generated from vLLM's own parser by
tools/gen_vllm_flags.py (do not edit; tests/test_vllm_flags.py checks that it
equals the installed vLLM's).

One row per flag: (option strings, dest, scope, action, nargs, value type, choices).

* scope: ``server`` (vLLM's API server: its FrontendArgs and ``vllm serve``'s
  own flags) or ``engine`` (its AsyncEngineArgs)

* action: ``store_true``; ``bool`` (``--x`` / ``--no-x``); ``store``; ``append``
* value type: ``str``, ``int``, ``float``, ``json``, ``dict_or_str`` (a JSON
  object or a plain string), ``human_int`` (``1k``, ``2M``), ``human_int_or_auto``,
  ``snake`` (lower-cased, ``-`` to ``_``), ``int_or_str_list`` (comma separated);
  a trailing ``?`` means ``None`` (or an empty value) is accepted too
"""

VLLM_VERSION = {version!r}

# The positional model of ``vllm serve MODEL`` (dest ``model_tag``) is not a row.
FLAGS: tuple[tuple[tuple[str, ...], str, str, str, str | None, str, tuple | None], ...] = (
'''


def _type_name(fn) -> str:
    """The table's name for an argparse ``type=`` callable of vLLM's parser."""
    if fn is None or fn is str:
        return "str"
    if fn is int:
        return "int"
    if fn is float:
        return "float"
    name = getattr(fn, "__name__", "")
    if name == "loads" or name == "parse_dataclass":
        return "json"
    if name in ("human_readable_int", "human_readable_int_or_auto", "union_dict_and_str"):
        return {"human_readable_int": "human_int", "union_dict_and_str": "dict_or_str"}.get(
            name, "human_int_or_auto")
    if name in ("_optional_type", "_parse_type"):
        inner = _type_name(fn.__closure__[0].cell_contents)
        return inner + "?" if name == "_optional_type" and not inner.endswith("?") else inner
    if name == "<lambda>":
        if fn("A-B") == "a_b":
            return "snake"
        if fn("1, x") == [1, "x"]:
            return "int_or_str_list"
    raise ValueError(f"unknown argparse type {fn!r}: teach tools/gen_vllm_flags.py its name")


def _action_name(action: argparse.Action) -> str:
    kind = type(action).__name__
    if kind == "_StoreTrueAction":
        return "store_true"
    if kind == "BooleanOptionalAction":
        return "bool"
    if kind == "_AppendAction":
        return "append"
    return "store"


def vllm_flag_rows() -> tuple[str, list[tuple]]:
    """(vLLM's version, one row per flag of its serve parser)."""
    import dataclasses

    import vllm
    from vllm.entrypoints.launchers.cli_args import FrontendArgs, make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    # make_arg_parser's own flags come before FrontendArgs' and AsyncEngineArgs'.
    server = {f.name for f in dataclasses.fields(FrontendArgs)} | {
        "headless", "api_server_count", "config", "grpc"}
    rows = []
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        kind = _action_name(action)
        value_type = "" if kind in ("store_true", "bool") else _type_name(action.type)
        choices = None
        if action.choices is not None:
            choices = tuple(c for c in action.choices if c is not None)
        scope = "server" if action.dest in server else "engine"
        rows.append((tuple(action.option_strings), action.dest, scope, kind,
                     action.nargs if isinstance(action.nargs, str) else None,
                     value_type, choices))
    return vllm.__version__, rows


def render(version: str, rows: list[tuple]) -> str:
    lines = [HEADER.format(version=version)]
    for options, dest, scope, kind, nargs, value_type, choices in rows:
        lines.append(f"    ({options!r}, {dest!r}, {scope!r}, {kind!r}, {nargs!r}, "
                     f"{value_type!r}, {choices!r}),\n")
    lines.append(")\n")
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed table instead of writing it")
    args = parser.parse_args(argv)
    text = render(*vllm_flag_rows())
    if args.check:
        same = TARGET.read_text() == text
        print("up to date" if same else f"{TARGET} differs from vLLM's parser: regenerate it")
        return 0 if same else 1
    TARGET.write_text(text)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
