"""What the tests and the tools share: the project's processes and in-process state.

Not installed with the product (pyproject's packages are ``protocol``,
``frontend`` and ``engine_core``); the tests' fixtures (``tests/support``) and
the tools' entry points (``python -m tools....``) import it from the checkout.
It may import the product's packages; the product never imports it.

* ``ports``: free loopback ports for engines and frontends;
* ``procs``: process groups with log files, and what /proc says about them;
* ``waits``: waiting on a condition, and the one ``wait_healthy``;
* ``models``: the tiny test model and its LoRA adapters, built once under
  ``build/`` with one cache key (``tiny_model``, ``tiny_lora``: the builders);
* ``engines``: the engine processes (``engine-core --mock``, ``engine-core``,
  ``vllm serve --headless``) and the frontend-side ZMQ harness;
* ``frontend``: our frontend as a process, alone or with a mock engine;
* ``vllm_server``: vLLM's own API server attached to a headless engine;
* ``stack``: an engine and a frontend on fixed addresses, each restartable;
* ``state``: the application state the routes get, with no engine behind it.
"""
