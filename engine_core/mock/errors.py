"""How the mock engine fails: each exception is one of vLLM's failure modes."""


class EngineDead(Exception):
    """The busy loop died: the mock sends ENGINE_CORE_DEAD and exits 1."""


class InputPoisoned(Exception):
    """The input thread died: the mock stops reading input, silently."""


class StartupError(Exception):
    """The engine failed before it was ready (handshake)."""


class SilentExit(Exception):
    """Die like SIGKILL: no more output of any kind."""
