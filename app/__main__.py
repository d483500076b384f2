"""``python -m app`` / ``tandem``: the chat window, or a headless command (see ``app.cli.main``)."""

import sys


def main(argv: list[str] | None = None) -> int:
    from app.backends.build_check import PROBE_FLAG  # the child process of the build check

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [PROBE_FLAG]:
        # Nothing else imported: this process exists to be killed by a bad build.
        from app.backends.probe import main as probe

        return probe(argv[1:])
    if argv[:1] == ["--check-model"]:  # app.backends.model_check's child: killed by a bad model, if any
        from app.backends.model_trial import main as trial

        return trial(argv[1:])
    if argv[:1] == ["--make-draft"]:  # app.backends.draft_maker's child: the quantizer, cancellable by a kill
        from app.backends.draft_child import main as make_draft

        return make_draft(argv[1:])
    if argv[:1] == ["--engine"]:  # app.session.engine_link's child: the models, away from the window
        from app.enginehost.main import main as engine

        return engine(argv[1:])
    from app.cli.main import run

    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
