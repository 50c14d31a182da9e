"""Build the tiny deterministic Idefics3 test VLM (harness/tiny_vlm.py) into OUTDIR.

Usage::

    python -m tools.make_tiny_vlm OUTDIR
"""

from __future__ import annotations

import pathlib
import sys

from harness.tiny_vlm import build


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} OUTDIR", file=sys.stderr)
        return 2
    build(pathlib.Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
