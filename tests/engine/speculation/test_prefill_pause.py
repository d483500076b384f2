"""A long prompt read in pieces with other work between them (``generate``'s ``pause``,
the server's ``Interleave``): the other work gets the target, the long prompt's cache
is copied out and put back, and the long reply is the very one it would have been."""

from __future__ import annotations

from app.engine.speculation import speculative
from app.engine.prompting.chat import build_messages, chat_tokens
from app.engine.speculation.drafters import ModelDrafter
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import SamplingConfig, SpecConfig
from app.server.interleave import Interleave


def _history(turns: int) -> list[tuple[str, str]]:
    return [("user" if i % 2 == 0 else "assistant", f"Message number {i} of a long chat.") for i in range(turns)]


class _Session:
    def __init__(self, target) -> None:
        self.target = target


def test_other_replies_between_the_pieces_leave_the_long_reply_unchanged(q41_target, q40_draft, monkeypatch):
    monkeypatch.setattr(speculative, "PAUSE_EVERY", 64)
    long_prompt = chat_tokens(q41_target, build_messages(_history(31)))
    short_prompt = chat_tokens(q41_target, build_messages([("user", "Say hello.")]))
    assert len(long_prompt) > 3 * 64
    engine = SpeculativeEngine(q41_target, ModelDrafter(q40_draft, q41_target.n_vocab, eog_ids=q41_target.eog_ids))
    spec = SpecConfig(draft_max=4)
    alone = [e.id for e in engine.generate(long_prompt, SamplingConfig(), spec, 12).run()]
    short_alone = [e.id for e in engine.generate(short_prompt, SamplingConfig(), spec, 6).run()]
    q41_target.trim(0)
    waiting = ["a", "b"]
    served: list[list[int]] = []

    def take():
        return waiting.pop(0) if waiting else None

    def serve(_job) -> None:
        served.append([e.id for e in engine.generate(short_prompt, SamplingConfig(), spec, 6).run()])

    interleave = Interleave(_Session(q41_target), take, serve)
    generation = engine.generate(long_prompt, SamplingConfig(), spec, 12, pause=interleave.pause)
    interleaved = [e.id for e in generation.run()]
    assert served == [short_alone, short_alone]  # both waiting jobs ran, at the first pause
    assert interleaved == alone
    assert generation.stats.prompt_eval_tokens == len(long_prompt)  # nothing of the long prompt was read twice
