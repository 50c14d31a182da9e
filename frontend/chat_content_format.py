"""A chat template's content format, read from its Jinja AST as vLLM reads it.

vLLM's ``_detect_content_format`` (``vllm/renderers/chat_utils.py``): a
template that loops over a message's ``content`` (directly, through a
variable assigned from ``messages``, or through a macro parameter that
receives it) takes "openai" content, a list of parts; any other takes
"string" content, the parts' text joined.
"""

from __future__ import annotations

from collections.abc import Iterator

import jinja2
import jinja2.nodes


def _loads(node: jinja2.nodes.Node, name: str) -> bool:
    return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name == name


def _item(node: jinja2.nodes.Node, name: str, key: str) -> bool:
    """``name[key]`` or ``name.key``."""
    if isinstance(node, jinja2.nodes.Getitem):
        return (
            _loads(node.node, name)
            and isinstance(node.arg, jinja2.nodes.Const)
            and node.arg.value == key
        )
    if isinstance(node, jinja2.nodes.Getattr):
        return _loads(node.node, name) and node.attr == key
    return False


def _refers(node: jinja2.nodes.Node, name: str, key: str | None = None) -> bool:
    """``node`` is ``name`` (or ``name[key]``), maybe filtered, tested or sliced."""
    while True:
        if isinstance(node, jinja2.nodes.Filter):
            if node.node is None:
                return False
            node = node.node
        elif isinstance(node, jinja2.nodes.Test):
            node = node.node
        elif isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
            node = node.node
        else:
            break
    return _item(node, name, key) if key else _loads(node, name)


def _target_name(node: jinja2.nodes.Node) -> str:
    if not isinstance(node, jinja2.nodes.Name):
        raise ValueError("unsupported assignment target")
    return node.name


def _message_list_names(root: jinja2.nodes.Template) -> list[str]:
    """``messages`` and every variable assigned from it (slices, filters, ...)."""
    names = ["messages"]
    queue = ["messages"]
    while queue:
        current = queue.pop(0)
        for assign in root.find_all(jinja2.nodes.Assign):
            if _refers(assign.node, current):
                target = _target_name(assign.target)
                if target not in names:
                    names.append(target)
                    queue.append(target)
    return names


def _message_names(root: jinja2.nodes.Template) -> list[str]:
    """Loop variables of ``{% for message in messages %}``-like loops."""
    lists = _message_list_names(root)
    found = []
    for loop in root.find_all(jinja2.nodes.For):
        if any(_refers(loop.iter, name) for name in lists):
            found.append(_target_name(loop.target))
    return found


def _content_loops(root: jinja2.nodes.Template) -> Iterator[jinja2.nodes.For]:
    """Loops over a message's content: what makes a template take "openai" content."""
    messages = _message_names(root)

    def is_content(node: jinja2.nodes.Node) -> bool:
        return any(_refers(node, m, "content") for m in messages)

    # Macro parameters that receive message.content at some call site.
    params_by_loop: dict[int, set[str]] = {}
    loops_in_macros: set[int] = set()
    calls = list(root.find_all(jinja2.nodes.Call))
    for macro in root.find_all(jinja2.nodes.Macro):
        arg_names = [a.name for a in macro.args]
        params: set[str] = set()
        for call in calls:
            if not (isinstance(call.node, jinja2.nodes.Name) and call.node.name == macro.name):
                continue
            for i, arg in enumerate(call.args):
                if i < len(arg_names) and is_content(arg):
                    params.add(arg_names[i])
            for kw in call.kwargs:
                if kw.key in arg_names and is_content(kw.value):
                    params.add(kw.key)
        for loop in macro.find_all(jinja2.nodes.For):
            loops_in_macros.add(id(loop))
            if params:
                params_by_loop[id(loop)] = params

    for loop in root.find_all(jinja2.nodes.For):
        it = loop.iter
        if is_content(it):
            yield loop
        elif isinstance(it, jinja2.nodes.Name) and it.name in params_by_loop.get(id(loop), ()):
            yield loop
        elif (
            id(loop) not in loops_in_macros
            and isinstance(it, jinja2.nodes.Name)
            and it.name == "content"
        ):
            yield loop


def detect_content_format(env: jinja2.Environment, source: str) -> str:
    """ "openai" when the template iterates over message content, else "string"."""
    try:
        root = env.parse(source)
        next(_content_loops(root))
    except StopIteration:
        return "string"
    except Exception:  # unparsable template or an unusual AST: vLLM's default
        return "string"
    return "openai"
