"""Two clients taking turns each find their conversation again (``app/server/prompt_cache.py``):
an agent's long head is not read again after an editor's request came between, and the
reply is the one a fresh read gives."""

from __future__ import annotations

import inspect

import pytest

from app.session.kept_states import MIN_TOKENS_SAVED


@pytest.fixture(scope="module")
def head() -> list[dict]:
    source = inspect.getsource(inspect)[:4000]  # a long head: a file this project did not write
    return [{"role": "system", "content": "You review code."},
            {"role": "user", "content": f"```python\n{source}\n```\nWhat does this file do?"}]


def _ask(client, messages, max_tokens=12, **options):
    return client.chat.completions.create(model="tandem", messages=messages, max_tokens=max_tokens,
                                          temperature=0, **options)


def test_an_agent_finds_its_head_again_after_another_clients_request(client, head):
    first = _ask(client, head)
    assert first.usage.prompt_tokens > 2 * MIN_TOKENS_SAVED
    # Another client, another conversation: it takes the cache.
    other = _ask(client, [{"role": "user", "content": "Write a haiku about rain."}])
    assert other.usage.prompt_tokens_details.cached_tokens < MIN_TOKENS_SAVED
    follow_up = head + [{"role": "assistant", "content": first.choices[0].message.content},
                        {"role": "user", "content": "Which function is the longest?"}]
    second = _ask(client, follow_up)
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= first.usage.prompt_tokens - 1  # the head and the first question, not read again
    # The other client's conversation was kept too: its follow-up reads only what it adds.
    again = _ask(client, [{"role": "user", "content": "Write a haiku about rain."},
                          {"role": "assistant", "content": other.choices[0].message.content},
                          {"role": "user", "content": "Another, about snow."}])
    assert again.usage.prompt_tokens_details.cached_tokens < MIN_TOKENS_SAVED  # too short to be worth keeping
    # Put back, the conversation answers as it did when it was read: the same request
    # again, after the cache held something else entirely, without speculation.
    _ask(client, [{"role": "user", "content": "Count from one to twenty."}], max_tokens=40)
    restored = _ask(client, follow_up, extra_body={"tandem": {"speculative": False}})
    assert restored.usage.prompt_tokens_details.cached_tokens == restored.usage.prompt_tokens - 1
    assert restored.choices[0].message.content == second.choices[0].message.content


def test_it_keeps_the_most_recent_within_its_bounds_and_puts_back_the_best(q41_target):
    from app.server.prompt_cache import PromptCache

    conversations = [[100 + 7 * c + i % 50 for i in range(MIN_TOKENS_SAVED + 40)] for c in range(3)]
    cache = PromptCache(max_kept=2)
    q41_target.trim(0)
    for tokens in conversations:
        assert cache.before(q41_target, tokens) == 0  # nothing of it held or kept
        q41_target.trim(0)  # as the engine's prefill does: the cache holds what is shared, no more
        q41_target.evaluate(tokens, [])
    assert cache.stored == 2 and len(cache._kept) == 2  # the first two, each before it was replaced
    # The second comes back; the third is kept as it goes, and the first, the least
    # recently used, is let go (max_kept=2).
    grown = conversations[1] + [5, 6, 7]
    assert cache.before(q41_target, grown) == len(conversations[1])
    assert q41_target.tokens == conversations[1] and cache.restored == 1
    assert cache.before(q41_target, conversations[0] + [5]) == 0  # let go: read again
    assert 0 < cache.held_bytes <= cache.budget_bytes
    q41_target.trim(0)
    q41_target.evaluate(conversations[2], [])
    for small in (PromptCache(budget_bytes=1), PromptCache(free_memory=lambda: 1000)):
        # No copy fits the budget, or a quarter of the free memory: nothing kept, nothing lost.
        assert small.before(q41_target, conversations[0]) == 0 and small.stored == 0
        assert q41_target.tokens == conversations[2]
    q41_target.trim(0)
