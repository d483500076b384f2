"""The reply's figures say how much of the prompt came from the KV cache (an edit or a
Regenerate evaluates only the new suffix)."""

from app.engine.types import Stats
from app.ui.stats_format import message_summary, prompt_reused


def test_reused_prompt_tokens_are_in_the_reply_figures():
    stats = Stats(tokens=10, prompt_tokens=480, prompt_eval_tokens=12)
    assert prompt_reused(stats) == 468
    assert "prompt: 12 new, 468 reused" in message_summary(stats)


def test_a_prompt_evaluated_whole_says_nothing_of_reuse():
    assert prompt_reused(Stats(tokens=3, prompt_tokens=40, prompt_eval_tokens=40)) == 0
    assert "reused" not in message_summary(Stats(tokens=3, prompt_tokens=40, prompt_eval_tokens=40))
    assert prompt_reused(Stats(tokens=3)) == 0
