"""Anthropic's Messages API (``/v1/messages``, ``/v1/messages/count_tokens``) as
vLLM 0.32 serves it: a translation onto the chat route's pipeline."""
