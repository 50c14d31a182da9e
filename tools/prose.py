"""The prose of the generated reports, kept as markdown in docs/prose/.

The report tools (tools.bench.report, tools.reliability) turn data into
tables; what they say around the tables is read from here, so that editing
the words needs no code change.
"""

from __future__ import annotations

from pathlib import Path

PROSE = Path(__file__).resolve().parents[1] / "docs" / "prose"


def text(name: str) -> str:
    """docs/prose/NAME.md as written, ending in exactly one newline."""
    return (PROSE / f"{name}.md").read_text().rstrip("\n") + "\n"


def paragraph(name: str) -> str:
    """docs/prose/NAME.md, one paragraph, as one line (for a table cell or a list item)."""
    return _unwrap(text(name))


def sections(name: str) -> dict[str, str]:
    """docs/prose/NAME.md's ``## KEY`` sections, each one paragraph as one line."""
    out = {}
    for chunk in text(name).split("\n## ")[1:]:
        key, _, body = chunk.partition("\n")
        out[key.strip()] = _unwrap(body)
    return out


def _unwrap(body: str) -> str:
    return " ".join(line.strip() for line in body.strip().splitlines())
