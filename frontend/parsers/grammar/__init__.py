"""Grammar parsers: a model's output format declared as data, run per delta.

vLLM 0.32's declarative parser engine (``vllm/parser/engine``), reduced to
what the grammars here use.  :mod:`~frontend.parsers.grammar.lexer` turns
text and token ids into terminals, :mod:`~frontend.parsers.grammar.machine`
runs a :class:`~frontend.parsers.grammar.machine.Grammar` (terminals and a
transition table) over them into events, and
:class:`~frontend.parsers.grammar.parser.GrammarParser` turns events into
reasoning, content and tool calls.  A model's grammar is one module here
(:mod:`~frontend.parsers.grammar.qwen3`, :mod:`~frontend.parsers.grammar.mistral`);
its tool and reasoning parsers are thin classes in ``parsers/tool`` and
``parsers/reasoning`` that build it.
"""
