"""A protocol-faithful mock of a headless vLLM 0.32 EngineCore (``engine-core --mock``).

It speaks exactly what ``vllm serve MODEL --headless`` speaks, steps like a
FIFO continuous-batching scheduler over a deterministic "model", and fails the
way the real engine fails, so fast tests and benchmarks can stand in for vLLM.
One module per job:

* ``cli``: the arguments and the entry point (one rank here, or a launcher);
* ``ranks``: a launcher running several data-parallel ranks, one process each;
* ``engine``: one rank's sockets, handshake, busy loop, input and output;
* ``scheduler``: FIFO continuous batching, steps and ``SchedulerStats``;
* ``requests``: a live request and the deterministic model writing its tokens;
* ``scripts``: scripted output, the token ids a test states for a prompt;
* ``logprobs``: sample and prompt logprobs arrays;
* ``prefix_cache``: block hashing, hits and ``PrefixCacheStats``;
* ``utilities``: the UTILITY methods (pause, sleep, reset_prefix_cache, ...);
* ``pooling``: pooling models (``--runner pooling``): tasks and pooled outputs;
* ``loras``: LoRA adapters (``--enable-lora``): add_lora and ADDs naming one;
* ``control``: the control socket: counters, faults, settings, scripts;
* ``facts``: vocabulary and special ids from a model directory;
* ``errors``: the failure modes, as exceptions.
"""

from engine_core.mock.cli import main

__all__ = ["main"]
