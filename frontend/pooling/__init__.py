"""Pooling models: embeddings, classification, scores and reranking.

The engine serves a pooling model as it serves a generative one: an
``EngineCoreRequest`` carries ``pooling_params`` instead of
``sampling_params`` and its one output carries ``pooling_output``, a tensor.
Each input of a request is one engine request in the fan-out table (as vLLM
sends them); the routes are those vLLM 0.32 registers for the engine's tasks.

* ``model``: what the engine's tasks and the model's config say is served;
* ``schemas``: the request bodies; ``params``: the engine's PoolingParams;
* ``inputs``: inputs (text, tokens, chat, query/document pairs) -> token ids;
* ``run``: one batch through the fan-out table; ``vectors``: output encodings;
* ``embed``, ``classify``, ``score``: the endpoints; ``routes``: which exist.
"""
