"""Exceptions of the wire layer."""

from __future__ import annotations

from typing import Any


class ProtocolError(Exception):
    """The peer sent something this implementation of the protocol cannot accept."""


class EngineVersionError(ProtocolError):
    """The engine runs a vLLM version whose wire format we do not speak."""


class UtilityCallError(ProtocolError):
    """A utility call the engine ran and reported as failed; ``failure_message``
    is the engine's text (``"Call to <method> method failed: <error>"``)."""

    def __init__(self, failure_message: str) -> None:
        super().__init__(f"engine utility call failed: {failure_message}")
        self.failure_message = failure_message


class ValidationError(ValueError):
    """A request the engine would reject (or die on); mirrors VLLMValidationError.

    ``str()`` matches vLLM's text, so clients see the same message from us as
    from vLLM's own server: ``"<message> (parameter=<p>, value=<v>)"``.
    """

    def __init__(self, message: str, *, parameter: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.parameter = parameter
        self.value = value

    def __str__(self) -> str:
        extras = []
        if self.parameter is not None:
            extras.append(f"parameter={self.parameter}")
        if self.value is not None:
            extras.append(f"value={self.value}")
        return f"{self.message} ({', '.join(extras)})" if extras else self.message
