"""One benchmark's section of ``docs/benchmarks.md``, written with its JSON and figure.

The pooling and multimodal benchmarks each own one section of the page:
their results go to ``<stem>.json`` and ``<stem>.png`` beside it, and the
section is replaced in place (added at the end the first time), the rest of
the page kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.bench.run import log


def write_section(
    results: dict[str, Any],
    out_dir: Path,
    stem: str,
    heading: str,
    section: Callable[[dict[str, Any], str, str], list[str]],
    plot: Callable[[dict[str, Any]], Any],
) -> Path:
    """Write ``results`` and the (matplotlib) figure ``plot`` draws, then put the lines
    ``section(results, json_name, png_name)`` (starting with ``heading``) in
    ``out_dir/benchmarks.md``; returns the page."""
    json_path = out_dir / f"{stem}.json"
    png_path = out_dir / f"{stem}.png"
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    try:
        figure = plot(results)
        figure.tight_layout()
        figure.savefig(png_path, dpi=110)
    except ImportError:
        log("matplotlib is missing (pip install -e '.[bench]'): no figure")
    md = out_dir / "benchmarks.md"
    text = md.read_text() if md.exists() else "# Benchmarks\n"
    new = "\n".join(section(results, json_path.name, png_path.name))
    start = text.find(heading)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + new
    else:
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + new + (text[end + 1 :] if end >= 0 else "")
    md.write_text(text.rstrip("\n") + "\n")
    return md
