"""A prefix cache that counts hits the way vLLM's does, and its stats.

Full prompt blocks are hashed in a chain (salted by ``cache_salt``); a request
reuses the leading blocks already cached, except the one holding its last
prompt token (at least one token is always computed). Least recently used
blocks go first once more than ``num_blocks`` are cached. Stats are vLLM 0.32's
``PrefixCacheStats`` (``KVCacheManager.record_prefix_cache_stats``): per step,
the requests that looked up the cache, their prompt tokens (queries) and the
cached tokens (hits); requests that skip the cache are not counted.
"""

from __future__ import annotations

from typing import Any

from engine_core.mock.requests import Request


def _empty_stats() -> dict[str, Any]:
    return {
        "reset": False,
        "requests": 0,
        "queries": 0,
        "hits": 0,
        "preempted_requests": 0,
        "preempted_queries": 0,
        "preempted_hits": 0,
        "hits_by_source": {},
    }


class PrefixCache:
    def __init__(self, block_size: int, num_blocks: int) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.blocks: dict[int, None] = {}  # block hashes, least recent first
        self.stats = _empty_stats()

    def lookup(self, r: Request) -> None:
        """Hash the request's full prompt blocks and count the cached ones."""
        size = self.block_size
        h = hash(r.cache_salt)
        hashes = r.block_hashes
        for start in range(0, r.prompt_len - size + 1, size):
            h = hash((h, *r.prompt[start : start + size]))
            hashes.append(h)
        if r.skip_cache:
            return
        usable = hashes[: (r.prompt_len - 1) // size]
        hits = next((i for i, h in enumerate(usable) if h not in self.blocks), len(usable))
        r.cached = hits * size
        stats = self.stats
        stats["requests"] += 1
        stats["queries"] += r.prompt_len
        stats["hits"] += r.cached

    def store(self, r: Request) -> None:
        """The request's prompt blocks are computed: cache them."""
        blocks = self.blocks
        for h in r.block_hashes:
            blocks.pop(h, None)  # re-insert: most recently used last
            blocks[h] = None
        while len(blocks) > self.num_blocks:
            del blocks[next(iter(blocks))]
        r.block_hashes = []

    def reset(self) -> None:
        self.blocks.clear()
        self.stats["reset"] = True

    def take_stats(self) -> dict[str, Any]:
        """This step's ``PrefixCacheStats``; the next step starts from zero."""
        stats, self.stats = self.stats, _empty_stats()
        return stats

    def prefill_stats(self, r: Request) -> dict[str, int]:
        """What the request's first output reports about its prompt."""
        n = r.prompt_len
        return {
            "num_prompt_tokens": n,
            "num_computed_tokens": n - r.cached,
            "num_cached_tokens": r.cached,
            "num_local_cached_tokens": r.cached,
            "num_external_cached_tokens": 0,
            # Full prompt blocks this request wrote to the prefix cache.
            "num_cache_creation_tokens": max(0, n // self.block_size * self.block_size - r.cached),
        }
