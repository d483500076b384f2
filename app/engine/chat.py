"""Chat prompts rendered with the model's own template, in a sandboxed Jinja environment.

A GGUF file's ``tokenizer.chat_template`` is code from whoever made the file, so
it runs in Jinja's immutable sandbox: no attribute tricks, no mutation of our data.
"""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache
from typing import Callable, Sequence

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from app.engine.backend import ModelBackend
from app.engine.errors import ChatTemplateError

# Used when a model carries no template of its own.
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _raise(message: str) -> None:
    raise ChatTemplateError(f"The chat template refused the conversation: {message}")


@lru_cache(maxsize=8)
def _compile(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(f"The model's chat template does not compile: {exc}") from None


def render_chat(template: str | None, messages: Sequence[dict], *, bos_token: str = "",
                eos_token: str = "", add_generation_prompt: bool = True) -> str:
    try:
        return _compile(template or CHATML).render(
            messages=list(messages), bos_token=bos_token, eos_token=eos_token,
            add_generation_prompt=add_generation_prompt)
    except ChatTemplateError:
        raise
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(f"The model's chat template failed: {exc}") from None


def chat_tokens(model: ModelBackend, messages: Sequence[dict]) -> list[int]:
    """Tokens of a conversation, ending with the assistant's turn opened."""
    bos = model.token_text(model.bos_id) if model.bos_id >= 0 else ""
    eos = model.token_text(model.eos_id) if model.eos_id >= 0 else ""
    text = render_chat(model.chat_template, messages, bos_token=bos, eos_token=eos)
    # Templates usually write the BOS themselves; add it only when they did not.
    add_bos = model.add_bos and not (bos and text.startswith(bos))
    tokens = model.tokenize(text, add_special=False, parse_special=True)
    return [model.bos_id, *tokens] if add_bos else tokens


def build_messages(history: Sequence[tuple[str, str]], system_prompt: str = "") -> list[dict]:
    """[(role, text), ...] -> the messages list templates expect."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt.strip() else []
    messages += [{"role": role, "content": text} for role, text in history]
    return messages


def fit_conversation(history: Sequence[tuple[str, str]], system_prompt: str,
                     tokens_of: Callable[[list[dict]], list[int]], budget: int) -> tuple[list[int], int]:
    """The conversation's tokens, its oldest exchanges left out until it fits in
    ``budget`` tokens; returned with how many messages were left out.

    The system prompt and the newest message always stay: when they alone do not fit,
    the engine's context error says so. Messages go an exchange at a time, since
    many templates insist that turns alternate and start with the user. The fewest
    exchanges to leave out are found by bisection, so a long chat is rendered and
    tokenized a handful of times, not once per exchange."""
    history = list(history)
    cuts = list(range(0, len(history) - 1, 2))
    if len(history) - 1 not in cuts:
        cuts.append(len(history) - 1)   # down to the newest message alone

    def tokens_after(cut: int) -> list[int]:
        return tokens_of(build_messages(history[cut:], system_prompt))

    tokens = tokens_after(0)
    if len(tokens) <= budget or len(cuts) == 1:
        return tokens, 0
    low, high = 1, len(cuts) - 1        # cuts[high] is tried last: it may still not fit
    fitting: tuple[list[int], int] | None = None
    while low <= high:
        middle = (low + high) // 2
        candidate = tokens_after(cuts[middle])
        if len(candidate) <= budget:
            fitting, high = (candidate, cuts[middle]), middle - 1
        else:
            low = middle + 1
    return fitting or (tokens_after(cuts[-1]), cuts[-1])


def conversation_tokens(model: ModelBackend, history: Sequence[tuple[str, str]], system_prompt: str,
                        max_tokens: int) -> tuple[list[int], int]:
    """The chat as the model will see it, and how many of its earliest messages were
    left out. Room is kept for the reply: its length limit, but at most half the
    context, so a generous limit does not push out the whole conversation."""
    budget = model.n_ctx - max(1, min(max_tokens, model.n_ctx // 2))
    return fit_conversation(history, system_prompt, lambda messages: chat_tokens(model, messages), budget)


def left_out_text(messages: int) -> str:
    return f"the {messages} earliest message{'s' if messages != 1 else ''} left out to fit the context"
