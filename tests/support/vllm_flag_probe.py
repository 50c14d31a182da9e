"""vLLM's own ``vllm serve`` parser, asked in a subprocess (it imports vLLM).

    python -m tests.support.vllm_flag_probe < COMMAND_LINES_JSON

stdin: a JSON list of command lines (``vllm`` arguments: ``serve MODEL ...``),
read by vLLM's own command-line parser (its ``serve`` subcommand).
stdout (last line): JSON ``{"flags": [...], "parsed": [...]}``:

* ``flags``: one entry per flag of vLLM's parser: ``options``, ``dest``, and
  ``samples``: command lines (one per option string, ``--no-`` forms included)
  that vLLM's parser accepts, each with the value vLLM parsed;
* ``parsed``: for each given command line, vLLM's parsed arguments (plain
  JSON values; others as null) or its error.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from typing import Any

# Values tried for a flag that takes one, first accepted wins.
CANDIDATES = ("1", "0.5", "{}", "x", "auto", "1k", "a=b")


def plain(value: Any) -> Any:
    """A JSON value, or None for what has no plain form (dataclasses, objects)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        items = [plain(v) for v in value]
        return None if any(i is None and v is not None for i, v in zip(items, value)) else items
    if isinstance(value, dict):
        items = {str(k): plain(v) for k, v in value.items()}
        return None if any(items[str(k)] is None and v is not None
                           for k, v in value.items()) else items
    return None


def parse(parser, argv: list[str]) -> tuple[bool, Any]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return True, parser.parse_args(argv)
    except SystemExit:
        return False, err.getvalue().strip().splitlines()[-1:] or ["exit"]
    except Exception as e:  # vLLM raises ValueError for some command lines
        return False, [f"{type(e).__name__}: {e}"]


def samples(make, action) -> list[dict[str, Any]]:
    """One accepted command line per option string: the flag's default written
    out if vLLM takes it back (a value a user would give), else a candidate."""
    from tools.gen_vllm_flags import _type_name

    default = action.default
    json_typed = action.nargs != 0 and _type_name(action.type).startswith(("json", "dict"))
    if isinstance(default, (list, dict)) and action.nargs is None:
        first = [json.dumps(default)]
    elif isinstance(default, list):
        first = [str(default[0])] if default else []
    elif json_typed:
        first = ["{}"]
    elif default is None or isinstance(default, bool) or not plain(default) == default:
        first = []
    else:
        first = [str(default)]
    out = []
    for option in action.option_strings:
        if action.nargs == 0:
            tries = [[option]]
        elif action.choices:
            tries = [[option, str(next(c for c in action.choices if c is not None))]]
        else:
            tries = [[option, c] for c in (*first, *CANDIDATES)]
        # (vLLM refuses --model next to a positional model)
        model = [] if action.dest == "model" else ["MODEL"]
        for argv in tries:
            ok, ns = parse(make(), ["serve", *model, *argv])
            if ok:
                # (a deprecated flag may store elsewhere: no value to compare)
                value = getattr(ns, action.dest, NotImplemented)
                if action.dest == "model":  # what `vllm serve` serves
                    value = ns.model_tag or ns.model
                out.append({"argv": [*model, *argv], "value": plain(value),
                            "plain": value is None or plain(value) is not None})
                break
    return out


def main() -> None:
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    def make():
        """`vllm`'s parser with its serve subcommand, as vllm.entrypoints.cli.main."""
        top = FlexibleArgumentParser()
        ServeSubcommand().subparser_init(top.add_subparsers(required=False, dest="subparser"))
        return top

    serve = make_arg_parser(FlexibleArgumentParser())
    flags = [{"options": list(a.option_strings), "dest": a.dest, "samples": samples(make, a)}
             for a in serve._actions if a.option_strings and a.dest != "help"]
    parsed = []
    defaults = {k: plain(v) for k, v in vars(make().parse_args(["serve", "MODEL"])).items()}
    for argv in json.loads(sys.stdin.read()):
        ok, ns = parse(make(), argv)
        if ok:
            # the flags the line sets (values other than vLLM's defaults)
            values = {k: plain(v) for k, v in vars(ns).items()
                      if plain(v) != defaults.get(k) or k == "model_tag"}
            parsed.append({"ok": True, "values": values})
        else:
            parsed.append({"ok": False, "error": ns})
    from tools.gen_vllm_flags import render, vllm_flag_rows

    print(json.dumps({"flags": flags, "parsed": parsed, "table": render(*vllm_flag_rows())}))


if __name__ == "__main__":
    main()
