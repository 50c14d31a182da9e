"""The frontend and the wire layer stay small: no vllm, torch, numpy or pydantic.

Runtime check: a fresh interpreter imports ``protocol`` and ``frontend`` and
every module below them (found with pkgutil) and must not have loaded any of
the forbidden packages. Static check: no import statement anywhere in those
packages (including inside functions, i.e. lazy imports) names them.
"""

import ast
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("protocol", "frontend")
FORBIDDEN = ("vllm", "torch", "numpy", "pydantic")

_PROBE = r"""
import importlib, json, pkgutil, sys
packages = {packages!r}
imported, failed = [], {{}}
for name in packages:
    pkg = importlib.import_module(name)
    imported.append(name)
    for info in pkgutil.walk_packages(pkg.__path__, prefix=name + "."):
        try:
            importlib.import_module(info.name)
            imported.append(info.name)
        except Exception as e:
            failed[info.name] = f"{{type(e).__name__}}: {{e}}"
loaded = sorted(m for m in sys.modules
                if any(m == f or m.startswith(f + ".") for f in {forbidden!r}))
print(json.dumps({{"imported": imported, "failed": failed, "loaded": loaded}}))
"""


def _python_files():
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


def test_fresh_interpreter_imports_no_heavy_packages():
    code = _PROBE.format(packages=PACKAGES, forbidden=FORBIDDEN)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not result["failed"], f"modules that fail to import: {result['failed']}"
    expected = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                for p in _python_files()}
    assert expected <= set(result["imported"]), expected - set(result["imported"])
    assert result["loaded"] == [], (
        f"importing {', '.join(PACKAGES)} pulled in {result['loaded']}; the frontend must "
        "not depend on vllm/torch/numpy/pydantic")


@pytest.mark.parametrize("path", list(_python_files()),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_import_statement_names_a_heavy_package(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    offending = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            if name.split(".")[0] in FORBIDDEN:
                offending.append(f"line {node.lineno}: {name}")
    assert not offending, f"{path.relative_to(ROOT)} imports {offending}"


def test_probe_would_notice_a_heavy_import():
    """The runtime check is not vacuous: the same probe sees msgspec, for example."""
    code = _PROBE.format(packages=("protocol",), forbidden=("msgspec",))
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "msgspec" in json.loads(proc.stdout.strip().splitlines()[-1])["loaded"]
