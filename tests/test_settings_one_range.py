"""One range per setting: every front end takes a number setting's range from its one
declaration in ``Settings`` (``app.storage.settings.number_range``), so a value at or
beyond either edge is accepted everywhere or refused everywhere: the settings file,
the command line, the window's editors, and the OpenAI, Responses and Ollama request
fields (through the very functions the routes run; ``test_a_live_server_agrees`` sends
a few over HTTP)."""

from __future__ import annotations

import json
import math

import httpx
import pytest

from app.cli.main import build_parser
from app.server.errors import ApiError
from app.server.ollama_requests import ChatRequest, chat_spec, checked
from app.server.requests import Defaults, chat_job
from app.server.responses import ResponseStore, chat_request
from app.storage.settings import Settings, load_settings, number_range

MESSAGES = [{"role": "user", "content": "hi"}]
# setting -> (command-line flag, OpenAI field, Ollama option); None: that front end has no such field
FRONTS = {
    "temperature": ("--temperature", "temperature", "temperature"),
    "top_k": ("--top-k", "top_k", "top_k"),
    "top_p": ("--top-p", "top_p", "top_p"),
    "min_p": ("--min-p", "min_p", "min_p"),
    "seed": ("--seed", "seed", "seed"),
    "max_tokens": ("--max-tokens", "max_tokens", "num_predict"),
    "draft_max": ("--draft-max", "tandem.draft_max", "draft_num_predict"),
    "draft_min": ("--draft-min", None, None),
    "p_min": ("--p-min", None, None),
    "n_ctx": ("--n-ctx", None, None),
    "n_threads": ("--threads", None, None),
}
# The exception declared beside Settings.max_tokens: Ollama's num_predict of 0, -1 or -2, or
# past the limit, means "as much as the context leaves" (Ollama's own meaning).
OLLAMA_MEANS_UNLIMITED = {("max_tokens", 0), ("max_tokens", number_range("max_tokens").high + 1)}
# The server's own limit on a reply (its context unless --max-tokens-limit) applies on top
# of the declared range; the probe serves with a limit at the declared top.
DEFAULTS = Defaults(max_tokens_limit=number_range("max_tokens").high)


def edges(name: str) -> list[tuple[float, bool]]:
    """(value, inside the declared range) at and beyond each edge."""
    r = number_range(name)
    step = 1 if r.kind is int else 0.01
    values = [(r.low, r.low_inclusive), (r.low - step, False), (r.high, True), (r.high + step, False)]
    if not r.low_inclusive:
        values.append((r.low + step, True))
    return [(r.kind(v), inside) for v, inside in values]


def settings_file_keeps(tmp_path, name, value) -> bool:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 1, "settings": {name: value}}))
    return load_settings(path).settings.to_dict()[name] == value


def command_line_takes(flag, value) -> bool:
    try:
        build_parser().parse_args(["generate", "-p", "hi", flag, str(value)])
    except SystemExit:
        return False
    return True


def _put(body: dict, field: str, value) -> dict:
    head, _, rest = field.partition(".")
    if rest:
        body.setdefault(head, {})[rest] = value
    else:
        body[field] = value
    return body


def openai_takes(field, value) -> bool:
    try:
        chat_job(_put({"model": "any", "messages": MESSAGES}, field, value), DEFAULTS)
    except ApiError:
        return False
    return True


def responses_take(field, value) -> bool:
    body = {"model": "any", "input": "hi"}
    _put(body, "max_output_tokens" if field == "max_tokens" else field, value)
    try:
        chat_job(chat_request(body, ResponseStore())[1], DEFAULTS)
    except ApiError:
        return False
    return True


def ollama_takes(option, value) -> bool:
    try:
        chat_spec(checked(ChatRequest, {"model": "any", "messages": MESSAGES, "options": {option: value}}), DEFAULTS)
    except ApiError:
        return False
    return True


@pytest.mark.parametrize("name", list(FRONTS))
def test_every_front_end_takes_the_declared_range(name, tmp_path):
    flag, field, option = FRONTS[name]
    for value, inside in edges(name):
        said = {"settings.json": settings_file_keeps(tmp_path, name, value),
                "Settings": _settings_take(name, value),
                "command line": command_line_takes(flag, value)}
        if field is not None:
            said["OpenAI"] = openai_takes(field, value)
            said["Responses"] = responses_take(field, value)
        if option is not None and (name, value) not in OLLAMA_MEANS_UNLIMITED:
            said["Ollama"] = ollama_takes(option, value)
        assert set(said.values()) == {inside}, (name, value, said)


def _settings_take(name, value) -> bool:
    try:
        Settings(**{name: value})
    except Exception:  # noqa: BLE001 - InvalidSettingError, a one-line reason
        return False
    return True


def test_the_windows_editors_span_the_declared_range(qtbot):
    """What the API accepts the window accepts: each editor's range is the declaration's
    (a spin box stops at 32 bits; the seed has an editor of its own for that)."""
    from app.ui.settings_dialog import SettingsDialog

    dialog = SettingsDialog(Settings())
    qtbot.addWidget(dialog)
    for name in FRONTS:
        r, editor = number_range(name), dialog.editors[name]
        if name == "seed":
            for value in (-1, 2**40, r.high):
                dialog.load(Settings(seed=value))
                assert dialog.settings().seed == value
            continue
        low = r.low - (1 if dialog.settings().to_dict()[name] == "auto" or name == "draft_max" else 0)
        assert math.isclose(editor.minimum(), low, abs_tol=0.011) and editor.maximum() == min(r.high, 2**31 - 1), name


def test_a_live_server_agrees(server_module):
    """Over HTTP too: the OpenAI and Ollama routes of a real ``tandem serve``."""
    url = server_module.url
    for value, ok in ((3.0, True), (5.0, True), (5.5, False)):
        reply = httpx.post(url + "/v1/chat/completions", timeout=300,
                           json={"model": "any", "messages": MESSAGES, "max_tokens": 1, "temperature": value})
        assert (reply.status_code == 200) == ok, reply.text
        reply = httpx.post(url + "/api/chat", timeout=300, json={"model": "any", "messages": MESSAGES, "stream": False,
                                                                 "options": {"num_predict": 1, "temperature": value}})
        assert (reply.status_code == 200) == ok, reply.text
    for seed in (2**40, 2**63 - 1):
        reply = httpx.post(url + "/api/chat", timeout=300, json={"model": "any", "messages": MESSAGES, "stream": False,
                                                                 "options": {"num_predict": 1, "seed": seed}})
        assert reply.status_code == 200, reply.text


@pytest.fixture(scope="module")
def server_module(demo_models):
    from server.live_server import serving

    yield from serving()


# Commands whose options set (or bound) a setting: each takes the setting's declared range.
COMMANDS = {
    "n_ctx": (["fit", "t.gguf", "--ctx"], ["pull", "org/repo", "--ctx"], ["serve", "--n-ctx"]),
    "max_tokens": (["serve", "--max-tokens-limit"],),
    "draft_max": (["bench", "--draft-max"],),
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_takes_the_declared_range(name):
    for value, inside in edges(name):
        for command in COMMANDS[name]:
            try:
                build_parser().parse_args([*command, str(value)])
                taken = True
            except SystemExit:
                taken = False
            assert taken == inside, (command, value)


def test_a_prompt_files_seed_takes_the_declared_range():
    from app.terminal.prompt_files import seed_field

    for value, inside in edges("seed"):
        try:
            seed_field(value)
            taken = True
        except ValueError:
            taken = False
        assert taken == inside, value


def test_the_dialogs_gpu_layers_reach_the_declared_top(qtbot):
    from app.ui.settings_dialog import LayerSpinBox

    box = LayerSpinBox()
    qtbot.addWidget(box)
    assert box.maximum() == min(number_range("target_gpu_layers").high, 2**31 - 1)


# -- one list per choice -------------------------------------------------------------
# The drafter kinds a user may choose are declared once (app/drafter_kinds.py): the
# settings file, Settings, every command's --drafter and the window's list offer exactly
# those, and refuse a kind chosen another way (an EAGLE-3 drafter: its file, named as
# the draft model) or none at all.

DRAFTER_COMMANDS = (["generate", "-p", "hi"], ["chat"], ["serve"], ["bench"], [])


def test_every_front_end_offers_the_declared_drafters(tmp_path, qtbot):
    from app.drafter_kinds import choices, declared
    from app.ui.settings_dialog import SettingsDialog

    dialog = SettingsDialog(Settings())
    qtbot.addWidget(dialog)
    box = dialog.editors["drafter"]
    assert tuple(box.itemData(i) for i in range(box.count())) == choices()
    assert tuple(box.itemText(i) for i in range(box.count())) == tuple(s.label for s in declared() if s.choosable)
    refused = [str(s.kind) for s in declared() if not s.choosable] + ["none", "ngram"]
    assert refused[0] == "eagle3"
    for value, inside in [(v, True) for v in choices()] + [(v, False) for v in refused]:
        said = {"settings.json": settings_file_keeps(tmp_path, "drafter", value),
                "Settings": _settings_take("drafter", value)}
        for command in DRAFTER_COMMANDS:
            try:
                build_parser().parse_args([*command, "--drafter", value])
                said[" ".join(command) or "tandem"] = True
            except SystemExit:
                said[" ".join(command) or "tandem"] = False
        assert set(said.values()) == {inside}, (value, said)
