"""``--model`` / ``--tokenizer``: a local directory, or a Hub id resolved as vLLM does.

vLLM 0.32 reads a Hub model's tokenizer and configs from a local snapshot of
the repository's non-weight files (``repo_utils.get_non_weight_snapshot_path``):
``snapshot_download`` with the weights ignored, in the Hugging Face cache
(``HF_HOME``/``HF_HUB_CACHE``, or ``--download-dir``), offline when
``HF_HUB_OFFLINE`` is set (then the cached snapshot of the revision is used,
or the start fails), with ``--revision`` (``--tokenizer-revision`` for the
tokenizer) and ``--hf-token``/``HF_TOKEN``. This module does the same with
``huggingface_hub``, imported only for a Hub id: a local directory costs
nothing at start-up.
"""

from __future__ import annotations

import logging
import os
import pathlib
from dataclasses import dataclass

log = logging.getLogger("frontend.hub")

# vLLM's _WEIGHT_FILE_PATTERNS: what a tokenizer or config never reads.
WEIGHT_FILE_PATTERNS = [
    "*.safetensors",
    "*.bin",
    "*.pt",
    "*.pth",
    "*.ckpt",
    "*.gguf",
    "*.h5",
    "*.msgpack",
    "*.onnx",
    "*.onnx_data",
    "*.png",
    "*.jpg",
    "*.jpeg",
    "*.gif",
    "*.webp",
    "*.mp3",
    "*.mp4",
    "*.wav",
    "*.flac",
    "*.parquet",
    "*.arrow",
    "*.ipynb",
    "*.zip",
    "*.tar*",
]


@dataclass(frozen=True)
class HubOptions:
    """vLLM's --download-dir and --hf-token (``True``: the stored login)."""

    download_dir: str | None = None
    token: str | bool | None = None


def is_local(name_or_path: str) -> bool:
    return os.path.exists(name_or_path)


def resolve(
    name_or_path: str, revision: str | None = None, options: HubOptions = HubOptions()
) -> pathlib.Path:
    """The local directory holding ``name_or_path``'s tokenizer and config files.

    Raises FileNotFoundError with a message for the command line when a Hub
    id can neither be found in the cache (offline) nor downloaded.
    """
    if is_local(name_or_path):
        path = pathlib.Path(name_or_path)
        if not path.is_dir():
            raise FileNotFoundError(f"{name_or_path}: not a directory")
        return path
    import huggingface_hub  # only for a Hub id (its import costs start-up time)
    from huggingface_hub import constants, errors

    offline = constants.HF_HUB_OFFLINE
    where = f"{name_or_path}" + (f" (revision {revision})" if revision else "")
    log.info(
        "resolving %s through the Hugging Face cache%s", where, " (offline)" if offline else ""
    )
    try:
        snapshot = huggingface_hub.snapshot_download(
            repo_id=name_or_path,
            revision=revision or constants.DEFAULT_REVISION,
            cache_dir=options.download_dir,
            token=options.token,
            local_files_only=offline,
            ignore_patterns=WEIGHT_FILE_PATTERNS,
        )
    except errors.HFValidationError as e:
        raise FileNotFoundError(
            f"{name_or_path}: neither a local directory nor a valid Hugging Face Hub id ({e})"
        ) from None
    except (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled) as e:
        cache = options.download_dir or constants.HF_HUB_CACHE
        raise FileNotFoundError(
            f"{where} is not in the Hugging Face cache ({cache}) and cannot be downloaded"
            f"{' (HF_HUB_OFFLINE is set)' if offline else ''}: {e}"
        ) from None
    except (
        errors.RepositoryNotFoundError,
        errors.RevisionNotFoundError,
        errors.GatedRepoError,
    ) as e:
        raise FileNotFoundError(f"{where}: {e}") from None
    except (errors.HfHubHTTPError, OSError, ValueError) as e:
        raise FileNotFoundError(
            f"{where}: cannot download from the Hugging Face Hub: {e}"
        ) from None
    log.info("%s -> %s", where, snapshot)
    return pathlib.Path(snapshot)


def repo_files(
    name_or_path: str, revision: str | None = None, options: HubOptions = HubOptions()
) -> list[str]:
    """The repository's file names, as vLLM lists them to pick a tokenizer mode:
    a local directory's files, else the Hub's listing (nothing offline or when
    the Hub cannot be reached)."""
    if is_local(name_or_path):
        root = pathlib.Path(name_or_path)
        return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()]
    import huggingface_hub
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return []
    try:
        return huggingface_hub.list_repo_files(name_or_path, revision=revision, token=options.token)
    except (OSError, ValueError) as e:
        log.warning("cannot list the files of %s on the Hub (%s)", name_or_path, e)
        return []
