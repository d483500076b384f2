"""What the terminal commands (app/cli) and the bench (app/bench) share: the options and
their types (shared.py, arg_types.py), the progress bar and loading, and prompt files."""
