"""The user's settings: declared once, saved as versioned JSON, written atomically.

Each field of ``Settings`` is the single declaration of a setting: its name, type
(the annotation), default, description and check. The dialog, the file format and
the validation all read from there, so adding a setting means adding one field.

File format: ``{"version": 1, "settings": {name: value, ...}}``. Loading never fails
and never blocks: only a regular file of at most ``MAX_FILE_BYTES`` is read (a FIFO or
a link to ``/dev/zero`` is refused at once); a file that can't be used at all is moved
aside and the user told where it went; a value that can't be used (nested deep, a
number of thousands of digits, out of range, text with lone surrogates) resets only
that setting, and the original file is kept aside too.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import reprlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, NamedTuple

from app.drafter_kinds import DEFAULT as DEFAULT_DRAFTER
from app.drafter_kinds import choice_help, choices as drafter_choices
from app.vocabulary import DRAFT_MAX_RANGE
from app.worker_address import AddressError, parse_split, parse_workers
from app.storage import paths
from app.storage.errors import InvalidSettingError, StorageError
from app.storage.files import atomic_write_text, move_aside
from app.storage.safe_json import Refused, UnreadableFile, loads_lenient, read_regular_file

SETTINGS_VERSION = 1
MAX_FILE_BYTES = 4 << 20  # a settings file is a few hundred bytes; long system prompts fit
MAX_TEXT_CHARS = 100_000  # with MAX_PATH_CHARS: every valid Settings saves under MAX_FILE_BYTES
MAX_PATH_CHARS = 4096     # PATH_MAX on Linux
MAX_PRESETS = 32          # all their texts together at most MAX_TEXT_CHARS, so the file bound holds
MAX_PRESET_NAME_CHARS = 80
MAX_FOLDERS = 32
MAX_RECENT_PAIRS = 10
MAX_CHAT_FORMATS = 256    # files with a chat format of the user's choice

# Version n -> a function turning the "settings" dict of a version-n file into version n+1.
# Loading applies them in order; an old file with no path to the current version counts as bad.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}

Check = Callable[[Any], Any]  # returns the value (normalised) or raises ValueError("must be ...")


# --- checks -------------------------------------------------------------------------------

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_NOT_FILE_NAME_BYTE = re.compile("[\ud800-\udc7f\udd00-\udfff]")


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("must be text")
    if len(value) > MAX_TEXT_CHARS:
        raise ValueError(f"must be at most {MAX_TEXT_CHARS:,} characters long")
    # Half a UTF-16 pair is no character: it cannot be saved as UTF-8 or shown.
    if _LONE_SURROGATE.search(value):
        raise ValueError("must be text without lone surrogates")
    return value


def _path(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("must be text")
    if len(value) > MAX_PATH_CHARS:
        raise ValueError(f"must be at most {MAX_PATH_CHARS:,} characters long")
    # A file name that is not UTF-8 arrives with its bytes as U+DC80..U+DCFF (Python's
    # surrogateescape) and must round-trip; any other lone surrogate is no file name.
    if _NOT_FILE_NAME_BYTE.search(value):
        raise ValueError("must be a file name without lone surrogates")
    return value


def _presets(value: Any) -> tuple[tuple[str, str], ...]:
    """Named system prompts: [[name, text], ...], names unique and not blank."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        raise ValueError("must be a list of [name, text] pairs")
    if len(value) > MAX_PRESETS:
        raise ValueError(f"must hold at most {MAX_PRESETS} presets")
    seen: set[str] = set()
    presets = []
    for name, text in value:
        name, text = _text(name).strip(), _text(text)
        if not name or len(name) > MAX_PRESET_NAME_CHARS:
            raise ValueError(f"must have names of 1 to {MAX_PRESET_NAME_CHARS} characters")
        if name.casefold() in seen:
            raise ValueError(f"must not name two presets {name!r}")
        seen.add(name.casefold())
        presets.append((name, text))
    if sum(len(text) for _, text in presets) > MAX_TEXT_CHARS:
        raise ValueError(f"must hold at most {MAX_TEXT_CHARS:,} characters of prompts in all")
    return tuple(presets)


def _paths(limit: int, per_item: int = 1) -> Check:
    """A list of paths (``per_item`` 1), or of pairs of paths (2: [target, draft])."""
    def check(value: Any) -> tuple:
        if not isinstance(value, (list, tuple)):
            raise ValueError("must be a list")
        if len(value) > limit:
            raise ValueError(f"must hold at most {limit} entries")
        if per_item == 1:
            return tuple(_path(item) for item in value)
        if not all(isinstance(item, (list, tuple)) and len(item) == per_item for item in value):
            raise ValueError(f"must be a list of [{', '.join(['path'] * per_item)}] entries")
        return tuple(tuple(_path(part) for part in item) for item in value)
    return check


_FORMAT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _chat_formats(value: Any) -> tuple[tuple[str, str], ...]:
    """[[model path, format name], ...]: the chat format chosen per file, each file once."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        raise ValueError("must be a list of [model path, format name] pairs")
    if len(value) > MAX_CHAT_FORMATS:
        raise ValueError(f"must hold at most {MAX_CHAT_FORMATS} entries")
    pairs: dict[str, str] = {}
    for path, name in value:
        if not isinstance(name, str) or not _FORMAT_NAME.fullmatch(name):
            raise ValueError("must name formats with letters, digits, '.', '_' and '-'")
        pairs[_path(path)] = name
    return tuple(pairs.items())


def chat_format_for(settings: Settings, model_path: str) -> str:
    """The chat format chosen for ``model_path`` ('' : the file's own)."""
    return dict(settings.chat_formats).get(model_path, "")


def with_chat_format(settings: Settings, model_path: str, name: str) -> Settings:
    """``settings`` with ``name`` as the chat format of ``model_path`` ('' forgets it);
    the newest choices are kept when there are too many."""
    pairs = [(p, n) for p, n in settings.chat_formats if p != model_path]
    if name:
        pairs.append((model_path, name))
    return settings.replace(chat_formats=tuple(pairs[-MAX_CHAT_FORMATS:]))


def remembered_chat_format(model_path: str, path: Path | None = None) -> str:
    """The chat format the settings file holds for ``model_path``, read without changing
    anything (the terminal commands use it; a bad file or entry is '')."""
    path = Path(path) if path is not None else paths.settings_file()
    try:
        values = _upgrade(loads_lenient(read_regular_file(path, MAX_FILE_BYTES).decode("utf-8")))
        return dict(_chat_formats(values.get("chat_formats", ()))).get(model_path, "")
    except (OSError, UnreadableFile, UnicodeDecodeError, ValueError, _UnusableFile):
        return ""


def preset_text(settings: Settings, name: str) -> str | None:
    """The system prompt of the preset ``name``; None when there is none by that name."""
    return next((text for preset, text in settings.system_prompt_presets if preset == name), None)


def with_recent_pair(settings: Settings, target: str, draft: str) -> Settings:
    """``settings`` with (target, draft) first among the recent pairs, each pair once."""
    pairs = [(target, draft)] + [p for p in settings.recent_pairs if p != (target, draft)]
    return settings.replace(recent_pairs=tuple(pairs[:MAX_RECENT_PAIRS]))


def _workers(value: Any) -> str:
    """llama.cpp RPC workers, 'host:port,host:port' (as --rpc); kept in their normal spelling."""
    try:
        return ",".join(parse_workers(_text(value)))
    except AddressError as exc:
        raise ValueError(f"must be workers written host:port, separated by commas ({exc})") from None


def _split(value: Any) -> str:
    """Shares of the target's layers, '3,1' (as --tensor-split); '' by free memory."""
    try:
        return ",".join(f"{share:g}" for share in parse_split(_text(value)))
    except AddressError as exc:
        raise ValueError(f"must be shares separated by commas, e.g. 3,1 ({exc})") from None


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value


@dataclass(frozen=True)
class Range:
    """A number setting's check and bounds: the one declaration every front end reads
    (the dialog's editors, the command line's types, the API's request fields), so a
    value one of them takes, all of them take."""

    kind: type           # int or float
    low: float | None = None
    high: float | None = None
    low_inclusive: bool = True

    def __call__(self, value: Any) -> Any:
        # bool is an int subclass in Python; ``true`` in the file is not a number.
        if self.kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError("must be a whole number")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError("must be a number")
        too_low = self.low is not None and (value < self.low if self.low_inclusive else value <= self.low)
        if too_low or (self.high is not None and value > self.high):
            raise ValueError(f"must be {self.words()}")
        return self.kind(value)

    def words(self) -> str:
        return _range_words(self.low, self.high, low_inclusive=self.low_inclusive)


def _integer(low: int | None = None, high: int | None = None) -> Range:
    return Range(int, low, high)


def _number(low: float, high: float | None = None, *, low_inclusive: bool = True) -> Range:
    return Range(float, low, high, low_inclusive)


def _one_of(*choices: str) -> Check:
    def check(value: Any) -> str:
        if value not in choices:
            raise ValueError("must be one of " + ", ".join(repr(c) for c in choices))
        return value
    return check


def _drafter(value: Any) -> str:
    """A drafter kind a user may choose (the table's words as they are now)."""
    return _one_of(*drafter_choices())(value)


@dataclass(frozen=True)
class AutoOr:
    """'auto', or a number of ``inner``'s range."""

    inner: Range

    def __call__(self, value: Any) -> Any:
        if value == "auto":
            return value
        try:
            return self.inner(value)
        except ValueError as exc:
            raise ValueError(f"must be 'auto' or {str(exc).removeprefix('must be ')}") from None


def _auto_or(inner: Range) -> AutoOr:
    return AutoOr(inner)


def _range_words(low: float | None, high: float | None, *, low_inclusive: bool = True) -> str:
    if low is not None and high is not None:
        if low_inclusive:
            return f"from {low} to {high}"
        return f"above {low} and at most {high}"
    if low is not None:
        return f"at least {low}" if low_inclusive else f"above {low}"
    return f"at most {high}"


def option(default: Any, description: str, check: Check) -> Any:
    """Declare one setting: its default, a sentence for the user, and its check."""
    return field(default=default, metadata={"description": description, "check": check})


# --- the declaration ----------------------------------------------------------------------

@dataclass(frozen=True)
class Settings:
    """Every user setting. Instances are valid by construction (``__post_init__`` checks)."""

    # Models
    target_path: str = option("", "Target model (GGUF). Empty: the demo pair's target.", _path)
    draft_path: str = option("", "Draft model (GGUF). Empty: the demo pair's draft.", _path)
    # One of the kinds app/drafter_kinds.py declares choosable (its words, read when checked).
    drafter: str = option(DEFAULT_DRAFTER.value, "Where guesses come from. " + choice_help() + ".", _drafter)
    # Speculation
    speculation: bool = option(True, "Speculate with the drafter; off decodes with the target alone.", _flag)
    draft_max: int | Literal["auto"] = option(
        "auto", "Most tokens drafted per round ('auto' lets the engine choose).", _auto_or(_integer(*DRAFT_MAX_RANGE)))
    draft_min: int = option(1, "Fewer drafted tokens than this: decode plainly that round.",
                            _integer(1, DRAFT_MAX_RANGE[1]))
    p_min: float = option(0.0, "Stop drafting when the draft's top probability falls below this.", _number(0.0, 1.0))
    copy_repeats: bool = option(
        True, "When the reply repeats text from the chat, copy it as the guess instead of "
        "running the draft model.", _flag)
    tree: Literal["auto", "on", "off"] = option(
        "auto", "Token trees: verify the draft's second guesses beside its first in one batch. 'auto' "
        "branches where its measurements say a tree pays, 'on' wherever the draft is unsure, 'off' never.",
        _one_of("auto", "on", "off"))
    # Hardware
    # Upper bounds as on the command line: llama.cpp keeps these in 32 bits or fewer.
    target_gpu_layers: int | Literal["auto"] = option(
        "auto", "Target layers on the GPU ('auto': as many as fit beside the draft, planned before "
        "loading; -1: all).", _auto_or(_integer(-1, 100_000)))
    draft_gpu_layers: int | Literal["auto"] = option(
        "auto", "Draft layers on the GPU ('auto': all of them if they fit, planned before loading; -1: all).",
        _auto_or(_integer(-1, 100_000)))
    n_ctx: int = option(4096, "Context size in tokens.", _integer(256, 2**24))
    n_threads: int = option(0, "CPU threads (0: adaptive, fewer while other programs keep cores busy).",
                            _integer(0, 1024))
    flash_attention: Literal["auto", "on", "off"] = option(
        "auto", "Flash attention: 'auto' (on a CPU, decoding runs without it, which verifies drafts "
        "after a long prompt faster, and a prompt of 512 tokens or more is read with it, which reads "
        "faster; on throughout for a quantised target or a sliding-window model, where it wins; "
        "llama.cpp's choice on a GPU), 'on' or 'off'.",
        _one_of("auto", "on", "off"))
    rpc_workers: str = option(
        "", "llama.cpp RPC workers the target's layers are split over, host:port separated by commas "
        "('tandem worker' on each machine); the draft stays here. Empty: this machine only.", _workers)
    tensor_split: str = option(
        "", "Each device's share of the target's layers, workers first, then this machine's GPUs "
        "(e.g. 3,1). Empty: in proportion to their free memory.", _split)
    # Sampling
    # At most 5 everywhere: the window, the command line and every API route (OpenAI's own
    # API stops at 2; a client that sends more to Tandem gets it, as the window would).
    temperature: float = option(0.8, "Sampling temperature (0: always the likeliest token).", _number(0.0, 5.0))
    top_k: int = option(40, "Sample among the k likeliest tokens (0: off).", _integer(0, 2**31 - 1))
    top_p: float = option(0.95, "Sample from the smallest set whose probability reaches p (1: off).",
                          _number(0.0, 1.0, low_inclusive=False))
    min_p: float = option(0.05, "Drop tokens less likely than this fraction of the top one (0: off).",
                          _number(0.0, 1.0))
    seed: int = option(-1, "Random seed (-1: a new one each time).", _integer(-1, 2**63 - 1))
    # One exception, applied by the Ollama routes alone: their num_predict of 0, -1 or -2, or
    # past the server's limit, asks for as much as the context leaves (Ollama's meaning).
    max_tokens: int = option(1024, "Longest reply in tokens.", _integer(1, 1_000_000))
    system_prompt: str = option("", "Instructions placed before every conversation.", _text)
    system_prompt_presets: tuple[tuple[str, str], ...] = option(
        (), "Named system prompts a chat can choose instead of the one above ([name, text] pairs).", _presets)
    chat_formats: tuple[tuple[str, str], ...] = option(
        (), "Chat format chosen per model file ([path, name] pairs: one of llama.cpp's built-in formats); "
        "a file not listed uses its own template.", _chat_formats)
    # Library
    library_folders: tuple[str, ...] = option(
        (), "Folders of GGUF files the model library scans besides LM Studio's, Ollama's and the "
        "Hugging Face cache.", _paths(MAX_FOLDERS))
    recent_pairs: tuple[tuple[str, str], ...] = option(
        (), "Target and draft pairs used lately, newest first (File > Recent pairs).", _paths(MAX_RECENT_PAIRS, 2))
    # Window
    show_colours: bool = option(True, "Colour tokens by what happened to them.", _flag)
    window_geometry: str = option("", "Saved window geometry (base64); kept by the window.", _text)
    text_zoom: float = option(1.0, "Reading-text size in the chat (Ctrl+= / Ctrl+- / Ctrl+0); kept by the window.",
                              _number(0.5, 3.0))
    side_panel_visible: bool = option(True, "Show the side panel (F9); kept by the window.", _flag)
    splitter_state: str = option("", "Saved widths of the window's panes (base64); kept by the window.", _text)
    server_port: int = option(8080, "Port of the window's local server (File > Local server); kept by its dialog.",
                              _integer(1, 65535))

    def __post_init__(self) -> None:
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            try:
                normalised = spec.metadata["check"](value)
            except ValueError as exc:
                raise InvalidSettingError(f"Setting {spec.name} {exc}, got {value!r}.") from None
            object.__setattr__(self, spec.name, normalised)  # e.g. temperature 1 -> 1.0

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` applied; raises InvalidSettingError for a bad value."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class OptionInfo(NamedTuple):
    name: str
    default: Any
    description: str


def number_range(name: str) -> Range:
    """The declared range of the number setting ``name`` (of its number, for one that
    may also be 'auto')."""
    check = next(f.metadata["check"] for f in dataclasses.fields(Settings) if f.name == name)
    check = check.inner if isinstance(check, AutoOr) else check
    if not isinstance(check, Range):
        raise KeyError(f"{name} is not a number setting")
    return check


def options() -> list[OptionInfo]:
    """The declared settings in order, for a dialog or ``--help`` text."""
    return [OptionInfo(f.name, f.default, f.metadata["description"]) for f in dataclasses.fields(Settings)]


# --- the file -----------------------------------------------------------------------------

class LoadedSettings(NamedTuple):
    settings: Settings
    notice: str | None  # one line for the user when something was reset, else None


class _UnusableFile(Exception):
    """The file as a whole can't be used (reason in the message)."""


def load_settings(path: Path | None = None) -> LoadedSettings:
    """Read the settings file. Never raises: bad content falls back to defaults with a notice."""
    path = Path(path) if path is not None else paths.settings_file()
    try:
        document = loads_lenient(read_regular_file(path, MAX_FILE_BYTES).decode("utf-8"))
        values = _upgrade(document)
    except FileNotFoundError:
        return LoadedSettings(Settings(), None)  # first start: nothing to complain about
    except OSError as exc:
        return _start_over(path, exc.strerror or type(exc).__name__)
    except UnreadableFile as exc:
        return _start_over(path, str(exc))
    except UnicodeDecodeError:
        return _start_over(path, "not UTF-8 text")
    except json.JSONDecodeError as exc:
        return _start_over(path, f"not valid JSON at line {exc.lineno}")
    except _UnusableFile as exc:
        return _start_over(path, str(exc))

    accepted: dict[str, Any] = {}
    rejected: list[str] = []
    for spec in dataclasses.fields(Settings):
        if spec.name not in values:
            continue  # a setting added since the file was written keeps its default
        try:
            accepted[spec.name] = spec.metadata["check"](values[spec.name])
        except ValueError as exc:
            rejected.append(f"{spec.name} ({exc}, got {_shown(values[spec.name])})")
    settings = Settings(**accepted)  # unknown keys are ignored: they came from elsewhere
    if not rejected:
        return LoadedSettings(settings, None)

    where = _keep_aside(path)
    try:
        save_settings(settings, path)  # so the next start neither warns again nor loses the good values
    except StorageError:
        pass
    return LoadedSettings(settings, f"Invalid settings were reset to their defaults: {'; '.join(rejected)}. {where}")


def save_settings(settings: Settings, path: Path | None = None) -> None:
    """Write ``settings`` atomically; raises StorageError with a one-line reason."""
    path = Path(path) if path is not None else paths.settings_file()
    document = {"version": SETTINGS_VERSION, "settings": settings.to_dict()}
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A non-UTF-8 file name (surrogateescape) has no UTF-8 form: JSON's \u escapes
        # carry it, and the file stays valid UTF-8.
        text = json.dumps(document, indent=2, ensure_ascii=True) + "\n"
    if len(text.encode("utf-8")) > MAX_FILE_BYTES:  # loading would refuse it, and every value with it
        raise StorageError(f"Could not save settings to {path}: they would take more than "
                           f"{MAX_FILE_BYTES:,} bytes.")
    try:
        atomic_write_text(path, text)
    except (OSError, ValueError) as exc:
        raise StorageError(f"Could not save settings to {path}: {getattr(exc, 'strerror', None) or exc}") from exc


def _upgrade(document: Any) -> dict[str, Any]:
    if not isinstance(document, dict) or not isinstance(document.get("settings"), dict):
        raise _UnusableFile('not a Tandem settings file (expected {"version": ..., "settings": {...}})')
    version = document.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise _UnusableFile(f"unknown version {version!r}")
    if version > SETTINGS_VERSION:
        raise _UnusableFile(f"written by a newer Tandem (version {version})")
    values = document["settings"]
    while version < SETTINGS_VERSION:
        migrate = MIGRATIONS.get(version)
        if migrate is None:
            raise _UnusableFile(f"no upgrade from version {version}")
        values = migrate(dict(values))
        version += 1
    return values


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 60
_SHOWN.maxlevel = 3


def _shown(value: Any) -> str:
    """A rejected value in a notice: short, and why it was left out when it was."""
    refused = _refusal_in(value)
    if refused is not None:
        return repr(refused)
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"a number of {len(str(value)):,} digits"
    return _SHOWN.repr(value)


def _refusal_in(value: Any) -> Refused | None:
    stack = [value]
    while stack:  # values from loads_lenient are at most MAX_DEPTH deep; the file is small
        item = stack.pop()
        if isinstance(item, Refused):
            return item
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _start_over(path: Path, reason: str) -> LoadedSettings:
    notice = f"Settings file {path} could not be used ({reason}); using defaults. {_keep_aside(path)}"
    return LoadedSettings(Settings(), notice)


def _keep_aside(path: Path) -> str:
    """Move the file out of the way and say where, as the tail of a notice."""
    try:
        return f"The original was kept as {move_aside(path)}."
    except OSError as exc:
        return f"The original could not be moved aside ({exc.strerror or exc})."
