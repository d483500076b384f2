"""Streams a reply into a history store until it is killed. Driven by test_crash.py.

Usage: python crash_child.py DB_PATH RUN

Prints ``ready <message id>`` once the long reply has begun, then for every token
``g <n> <time>`` (n tokens generated, by then) and, when that append committed, ``c <n>``. The parent
reads these after the SIGKILL to know what was generated and what was promised durable.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from app.storage.history import HistoryStore, TokenRecord, token_record

WORDS = ["The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", ",", " café",
         " 日本", " 🦊", "\n", " <b>", "bold", "</b>", " &", " naïve", "."]
KINDS = ["accepted", "accepted", "accepted", "corrected", "bonus", "plain"]
TOKENS_PER_SECOND = 1000  # a fast GPU; the test also holds at slower rates


def token(run: int, index: int) -> TokenRecord:
    """The index-th token of run ``run``: deterministic, so the parent can rebuild the stream."""
    kind = KINDS[(index + run) % len(KINDS)]
    if kind == "corrected":
        return token_record(WORDS[index % len(WORDS)], kind, draft_text=WORDS[(index + 1) % len(WORDS)],
                            draft_prob=(index % 7) / 8)
    return token_record(WORDS[index % len(WORDS)], kind)


def main(db_path: Path, run: int) -> None:
    store = HistoryStore.open(db_path)
    conversation = store.create_conversation()
    store.add_message(conversation, "user", f"Run {run}: a warm-up question")
    warm_up = store.begin_reply(conversation, {"run": run, "part": "warm-up"})
    warm_up.finish({"tokens": 20}, tokens=[token(run, i) for i in range(20)])
    store.add_message(conversation, "user", f"Run {run}: now tell me a long story")

    writer = store.begin_reply(conversation, {"run": run, "part": "long"})
    emit(f"ready {writer.message_id}\n")
    generated = 0
    while True:  # until SIGKILL
        committed = writer.append([token(run, generated)])
        generated += 1
        emit(f"g {generated} {time.time():.6f}\n" + (f"c {generated}\n" if committed else ""))
        time.sleep(1 / TOKENS_PER_SECOND)


def emit(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
