"""``response_template`` parsing: Hugging Face's declarative output format.

A checkpoint may describe its assistant output in ``tokenizer_config.json``'s
``response_template``: regions (thinking, content, tool calls) opened and
closed by literal or regex delimiters, each region's body parsed as text,
JSON, XML-ish tags or key/value lines.  vLLM 0.32's ``hf`` parsers run
transformers' streaming parser for it, vendored in vLLM as
``vllm/parser/chat_parsing``; these modules are that code (Apache-2.0, the
Hugging Face team), unchanged but for imports and formatting:

* ``content.py``: the region body parsers and the ``transform`` templates;
* ``template.py``: loading and validating a ``response_template`` dict;
* ``stream.py``: :class:`ResponseParser`, the streaming region parser.

The delimiter scan needs partial regex matches (is this buffer tail the start
of a delimiter?), which only the ``regex`` package offers.
"""
