"""Exception types shared by every role.

Each SPI raises one documented family of errors so callers can handle a failure without knowing
which implementation is behind the interface.
"""

from __future__ import annotations


class CuveeError(Exception):
    """Root of every error Cuvee raises on purpose (user mistakes and expected failures)."""


class UserError(CuveeError):
    """A mistake in what a user gave us (a file, a flag, a config): shown as one line, never a traceback."""
