"""User-facing errors: one line that says what is wrong, where, and how to fix it.

The CLI prints ``str(error)`` and exits with ``error.exit_code``; no traceback.
"""


class InnerguardError(Exception):
    """An error the user can fix. The message is the whole story, one line."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None):
        self.hint = hint
        super().__init__(f"{message} ({hint})" if hint else message)


class ModelError(InnerguardError):
    """A model cannot be found, prepared or read."""


class EngineStartError(InnerguardError):
    """vLLM cannot start, or the guard cannot prove its hooks fire."""
