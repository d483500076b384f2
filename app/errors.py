"""The root of every error Tandem reports to a user.

Each package defines its own subclasses; anything derived from ``TandemError``
carries a one-line message fit to show as is (no traceback).
"""


class TandemError(Exception):
    """An expected failure with a message written for the user."""
