"""Build a tiny deterministic test VLM into OUTDIR: Idefics3 (harness/tiny_vlm.py,
the default) or BLIP-2 (harness/tiny_blip2.py).

Usage::

    python -m tools.make_tiny_vlm [--family idefics3|blip2] OUTDIR
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from harness import tiny_blip2, tiny_vlm

BUILDERS = {"idefics3": tiny_vlm.build, "blip2": tiny_blip2.build}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=argv[0])
    parser.add_argument("--family", choices=sorted(BUILDERS), default="idefics3")
    parser.add_argument("outdir", type=pathlib.Path)
    args = parser.parse_args(argv[1:])
    BUILDERS[args.family](args.outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
