"""Instructions a benchmark executes inside ``operator.call``, counted by callgrind.

A benchmark module that can run its measured work as
``operator.call(work, ...)`` (a C function nothing else in these benchmarks
calls) gets that work's instruction count, and nothing else's, by running
itself once more in a child process under ``valgrind --tool=callgrind`` that
collects only while ``operator.call`` is on the stack. The count is the same
from run to run within a fraction of a percent, so a few-percent change
between two versions of the code shows (run with ``PYTHONPATH`` at each).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def operator_call_instructions(module: str, *args: str) -> int:
    """``python -m module *args`` under callgrind: the instructions inside ``operator.call``."""
    with tempfile.TemporaryDirectory(prefix="callgrind-") as tmp:
        out = Path(tmp) / "callgrind.out"
        argv = ["valgrind", "--tool=callgrind", "--collect-atstart=no",
                "--toggle-collect=_operator_call", f"--callgrind-out-file={out}",
                sys.executable, "-m", module, *args]
        subprocess.run(argv, check=True, cwd=ROOT, capture_output=True, timeout=1800)
        match = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.M)
        if match is None:
            raise RuntimeError(f"no instruction total in {out}")
    return int(match.group(1))
