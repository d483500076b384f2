"""One set of defaults: what ``generate``, ``chat``, ``serve`` and ``bench`` do when not told
is what the window does with a fresh ``Settings()``, so the docs can state each default once.

The options are parsed with the real parser, as a user's command line would be, so an
option given before the command (``tandem -m T generate``) and one given after it agree too.
"""

from __future__ import annotations

import argparse

import pytest

from app.cli.main import build_parser
from app.storage.settings import Settings

# How a command-line value reads as a setting, where the two spell it differently.
AS_SETTING = {
    "seed": lambda v: -1 if v is None else v,              # None: a new seed each run, -1 in Settings
    "rpc": lambda v: ",".join(v),                          # a tuple of workers; Settings keeps text
    "tensor_split": lambda v: ",".join(f"{s:g}" for s in v),
}
# Command-line name -> Settings field.
FIELD = {
    "draft_max": "draft_max", "draft_min": "draft_min", "p_min": "p_min",
    "temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "seed": "seed",
    "max_tokens": "max_tokens", "n_ctx": "n_ctx", "threads": "n_threads", "flash_attn": "flash_attention",
    "gpu_layers": "target_gpu_layers", "drafter": "drafter", "rpc": "rpc_workers",
    "tensor_split": "tensor_split",
}
# Where a command means something else by the same option, and says so in its --help.
EXCEPTIONS = {
    ("serve", "max_tokens"): None,  # a request without max_tokens may use what the context leaves (OpenAI's way)
    ("bench", "max_tokens"): 128,   # the length of each measured reply, not a chat's reply limit
    ("bench", "seed"): 0,           # a fixed seed, so that a measurement repeats
}
COMMANDS = {
    "generate": ["generate", "--prompt", "hi"],
    "chat": ["chat"],
    "serve": ["serve"],
    "bench": ["bench"],
}


def parsed(command: str) -> argparse.Namespace:
    return build_parser().parse_args(COMMANDS[command])


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_front_end_takes_the_windows_defaults(command):
    app = Settings()
    args = parsed(command)
    checked = []
    for name, field in FIELD.items():
        if not hasattr(args, name):
            continue
        value = getattr(args, name)
        if (command, name) in EXCEPTIONS:
            assert value == EXCEPTIONS[command, name], (command, name, value)
            continue
        value = AS_SETTING.get(name, lambda v: v)(value)
        assert value == getattr(app, field), f"tandem {command}: --{name.replace('_', '-')} defaults to " \
                                             f"{value!r}, the window to {getattr(app, field)!r}"
        checked.append(name)
    # The draft's GPU layers follow the target's unless told, as the window's -1 and -1 do.
    assert (args.draft_gpu_layers if args.draft_gpu_layers is not None else args.gpu_layers) == app.draft_gpu_layers
    # Speculating and copying repeats are on, as in the window.
    if hasattr(args, "no_speculation"):
        assert (not args.no_speculation) == app.speculation
    copying = (not args.no_copy) if hasattr(args, "no_copy") else args.copy in ("on", "both")
    assert copying == app.copy_repeats
    # The decoding options every command has (bench's sampling, where it has it, included above).
    assert {"draft_max", "n_ctx", "threads", "flash_attn", "gpu_layers", "drafter"} <= set(checked)


@pytest.mark.parametrize("command", ["generate", "chat", "serve"])
def test_the_sampling_commands_sample_as_the_window_does(command):
    args = parsed(command)
    assert (args.temperature, args.top_k, args.top_p, args.min_p) == (0.8, 40, 0.95, 0.05)
    assert args.draft_max == "auto"


def test_options_before_the_command_agree_with_those_after_it():
    parser = build_parser()
    before = parser.parse_args(["-m", "t.gguf", "-c", "512", "-t", "2", "generate", "-p", "hi"])
    after = parser.parse_args(["generate", "-p", "hi", "-m", "t.gguf", "-c", "512", "-t", "2"])
    for name in ("target", "n_ctx", "threads", "draft_max", "temperature", "max_tokens"):
        assert getattr(before, name) == getattr(after, name), name
