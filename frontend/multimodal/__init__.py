"""Multimodal inputs (images, audio, video) for vision-language models.

The main process stays torch-free: a request with media parts goes to a
pool of processor workers (``engine_core/mm_processor.py``, vLLM's own
renderer and input processor) that answer with the prompt token ids and the
``mm_features`` already encoded the way the engine decodes them; the
frontend forwards those frames untouched (``features.py``). Text-only
models never start a worker.
"""
