"""Build a LoRA adapter for the tiny test model (harness/tiny_lora.py) into OUTDIR.

Usage::

    python -m tools.make_tiny_lora MODEL_DIR OUTDIR [SEED]
"""

from __future__ import annotations

import pathlib
import sys

from harness.tiny_lora import build

if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    build(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]),
          int(sys.argv[3]) if len(sys.argv) == 4 else 1)
