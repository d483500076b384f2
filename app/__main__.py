"""``python -m app`` / ``tandem``: the chat window, or a headless command (see ``app.cli``)."""

import sys


def main(argv: list[str] | None = None) -> int:
    from app.cli import run

    return run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
