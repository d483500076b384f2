"""What the window asks of the history for each message on screen costs the same in a
long chat as in a short one: counted in SQLite's own virtual-machine steps, which do not
depend on the machine's speed."""

from __future__ import annotations

import pytest

from app.storage.history import HistoryStore, StoredMessage

STEPS_PER_CALL = 100  # the progress handler runs every this many VM instructions


def chat_of(store: HistoryStore, count: int) -> int:
    messages = [StoredMessage(id=i + 1, conversation_id=0, role="user" if i % 2 == 0 else "assistant", text=f"message {i}")
                for i in range(count)]
    return store.import_conversation("long", messages)


def vm_steps(store: HistoryStore, work) -> int:
    counted = [0]

    def count() -> int:
        counted[0] += 1
        return 0  # 0: carry on

    store._db.set_progress_handler(count, STEPS_PER_CALL)
    try:
        work()
    finally:
        store._db.set_progress_handler(None, STEPS_PER_CALL)
    return counted[0] * STEPS_PER_CALL


@pytest.mark.parametrize("ask", ["sibling_position", "siblings", "message"])
def test_a_message_on_screen_costs_the_same_in_a_chat_of_fifty_thousand(ask):
    # A chat shows its newest 200 messages, and each asks for its ‹ 2/3 › versions. A
    # query that walked the whole conversation per message froze the window for seconds
    # after a 100,000-message import.
    costs = {}
    for count in (200, 50_000):
        with HistoryStore.open() as store:
            conversation = chat_of(store, count)
            shown = [m.id for m in store.messages(conversation, last=20)]
            costs[count] = vm_steps(store, lambda: [getattr(store, ask)(i) for i in shown])
    assert costs[50_000] <= 2 * costs[200] + 2_000, costs


def test_an_old_row_without_a_stored_parent_still_finds_its_siblings():
    # Rows written before parents were stored have parent_id NULL: their parent is the
    # message before them. The faster plan must still see them.
    with HistoryStore.open() as store:
        conversation = chat_of(store, 4)
        ids = [m.id for m in store.messages(conversation)]
        store._db.execute("UPDATE messages SET parent_id = NULL WHERE id = ?", (ids[2],))
        assert store.siblings(ids[2]) == [ids[2]]
        assert store.sibling_position(ids[2]) == (1, 1)
        assert [m.text for m in store.messages(conversation)] == ["message 0", "message 1", "message 2",
                                                                  "message 3"]
