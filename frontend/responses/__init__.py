"""OpenAI's Responses API (``/v1/responses``) as vLLM 0.32 serves it, on the
chat route's pipeline (renderer, parsers, structured outputs, fan-out)."""
