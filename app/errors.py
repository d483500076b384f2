"""The root of every error Tandem reports to a user.

Each package defines its own subclasses; anything derived from ``TandemError``
carries a one-line message fit to show as is (no traceback).
"""


class TandemError(Exception):
    """An expected failure with a message written for the user."""


def one_line(exc: BaseException) -> str:
    """A message fit for a user: a TandemError's own words, otherwise type and first line."""
    if isinstance(exc, TandemError):
        return str(exc)
    text = str(exc).strip().splitlines()
    return f"Unexpected error: {type(exc).__name__}" + (f": {text[0]}" if text else "")
