"""``--tool-parser-plugin`` / ``--reasoning-parser-plugin``: a user's parsers.

As vLLM loads a plugin: the value is a module name on ``sys.path`` or the path
of a Python file, imported once at start-up, before the parser names are
checked (a value of three characters or fewer is ignored, vLLM's
``len(...) > 3``). The module registers its classes with vLLM's decorator,
spelled as in vLLM but imported from here::

    from frontend.parsers.plugins import ToolParserManager
    from frontend.parsers.text_so_far import TextSoFarToolParser

    @ToolParserManager.register_module("my_format")
    class MyToolParser(TextSoFarToolParser):
        ...

A plugin class is written on this frontend's bases (``frontend/parsers/README.md``;
``TextSoFarToolParser.extract_streaming`` keeps vLLM's argument list). A
plugin that subclasses vLLM's own ``ToolParser`` would import vLLM into this
process, which never loads it: it is refused with that reason. Unlike vLLM,
which logs a plugin that fails to import and goes on, a broken plugin stops
the start with its error.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any, ClassVar

from frontend.parsers import registry
from frontend.parsers.reasoning.base import ReasoningParser
from frontend.parsers.tool.base import ToolParser


class PluginError(ValueError):
    """A plugin that cannot be loaded or registers something that is not a parser."""


class _Manager:
    """vLLM's ``register_module(name=None, force=True, module=None)``."""

    kind: ClassVar[str]
    base: ClassVar[type]
    builtin: ClassVar[dict[str, Any]]
    table: ClassVar[dict[str, Any]]

    @classmethod
    def register_module(
        cls, name: str | list[str] | None = None, force: bool = True, module: type | None = None
    ) -> Any:
        if not isinstance(force, bool):
            raise TypeError(f"force must be a boolean, but got {type(force)}")
        if module is not None:
            cls._register(module, name, force)
            return module

        def decorator(obj: type) -> type:
            cls._register(obj, name, force)
            return obj

        return decorator

    @classmethod
    def _register(cls, module: Any, name: str | list[str] | None, force: bool) -> None:
        if not (isinstance(module, type) and issubclass(module, cls.base)):
            raise PluginError(
                f"a {cls.kind} plugin must register a subclass of this frontend's "
                f"{cls.base.__name__} ({cls.base.__module__}), got {module!r}"
            )
        names = [module.__name__] if name is None else [name] if isinstance(name, str) else name
        if not all(isinstance(n, str) for n in names):
            raise TypeError("module_name must be str, list[str], or None.")
        for n in names:
            if not force and (n in cls.table or n in cls.builtin):
                raise KeyError(f"{n} is already registered")
            cls.table[n] = module


class ToolParserManager(_Manager):
    kind = "tool parser"
    base = ToolParser
    builtin = registry.TOOL_PARSERS
    table = registry.PLUGIN_TOOL_PARSERS


class ReasoningParserManager(_Manager):
    kind = "reasoning parser"
    base = ReasoningParser
    builtin = registry.REASONING_PARSERS
    table = registry.PLUGIN_REASONING_PARSERS


def load_plugin(path: str | None, flag: str) -> ModuleType | None:
    """Import ``path`` (a module name, else a file) once; None for a short or empty value."""
    if not path or len(path) <= 3:
        return None
    before = set(sys.modules)
    try:
        try:
            module = importlib.import_module(path)
        except ModuleNotFoundError:
            module = _import_file(path)
    except PluginError:
        raise
    except Exception as e:  # the user's code: any error stops the start, with its reason
        raise PluginError(f"{flag} {path}: {type(e).__name__}: {e}") from e
    if "vllm" in sys.modules and "vllm" not in before:
        raise PluginError(
            f"{flag} {path}: the plugin imports vLLM; this frontend never loads vLLM "
            "into its process: write the parser on frontend.parsers' bases and register "
            "it with frontend.parsers.plugins (see the README, Parsers)"
        )
    return module


def _import_file(path: str) -> ModuleType:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no module or file named {path!r}")
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
