"""Chat prompts rendered with the model's own template, in a bounded Jinja sandbox.

A GGUF file's ``tokenizer.chat_template`` is code from whoever made the file, so it
runs in ``template_limits.BoundedEnvironment``: Jinja's immutable sandbox (no attribute
tricks, no mutation of our data) with a time limit, an output limit and no way to
build a billion-character value. Any failure of the template, of any kind, becomes one
line naming the file, and the reply goes ahead with a plain ChatML prompt.

Message contents are the user's (or an imported chat's) text, never the template's:
text in them that reads like a control token (``<|im_end|>``) is tokenized as text.
Only the template's own scaffolding becomes control tokens.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path
from typing import Callable, NamedTuple, Sequence
from weakref import WeakKeyDictionary

import jinja2

from app.engine.prompting import chat_formats
from app.engine.backend import ModelBackend
from app.engine.errors import ChatTemplateError
from app.engine.prompting.tool_prompt import ToolPlan, ToolRequest, prepare, tool_plan
from app.engine.prompting.template_limits import (
    OUTPUT_BASE_CHARS,
    BoundedEnvironment,
    RenderStopped,
    TemplateLimitError,
    render_bounded,
    stop_renders_on,
)

__all__ = ["CHATML", "ChatTokens", "RenderStopped", "build_messages", "chat_prompt", "chat_tokens",
           "conversation_prompt", "conversation_tokens", "fit_conversation", "left_out_text",
           "render_chat", "stop_renders_on"]

log = logging.getLogger(__name__)

# Used when a model carries no template of its own, and when its template fails.
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
MAX_TEMPLATE_CHARS = 64 * 1024  # real templates are a few kB; compiling 140 kB takes seconds
OUTPUT_PER_CONTENT_CHAR = 4      # a template may repeat the system prompt, say; not endlessly
OUTPUT_PER_MESSAGE = 256         # room for each message's scaffolding
REASON_CHARS = 200
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _raise(message: str) -> None:
    raise ChatTemplateError(f"The chat template refused the conversation: {_one_line(message)}")


_environment = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True)
_environment.globals["raise_exception"] = _raise


@lru_cache(maxsize=8)
def _compile(source: str) -> jinja2.Template | ChatTemplateError:
    """The compiled template, or why it has none (failures are cached too: compiling is slow)."""
    if len(source) > MAX_TEMPLATE_CHARS:
        return ChatTemplateError(f"The chat template is {len(source):,} characters long, over the limit "
                                 f"of {MAX_TEMPLATE_CHARS:,}")
    try:
        return _environment.from_string(source)
    except Exception as exc:  # noqa: BLE001 — syntax, nesting (RecursionError), memory: all one line
        return ChatTemplateError(f"The chat template does not compile: {_reason(exc)}")


def render_chat(template: str | None, messages: Sequence[dict], *, bos_token: str = "",
                eos_token: str = "", add_generation_prompt: bool = True, tools: list[dict] | None = None) -> str:
    """The conversation as the template writes it; raises ChatTemplateError (one line) for
    whatever goes wrong, and RenderStopped when the render is stopped (``stop_renders_on``).
    ``tools``: the template's ``tools`` (tool_prompt.py), left undefined when None."""
    if template is None:
        return chatml(messages, add_generation_prompt)
    compiled = _compile(template)
    if isinstance(compiled, ChatTemplateError):
        raise ChatTemplateError(str(compiled))  # a fresh one: the cached one would gather tracebacks
    contents = sum(len(m.get("content") or "") for m in messages if isinstance(m.get("content"), str))
    contents += _json_size(tools) + sum(_json_size(m.get("tool_calls")) for m in messages)
    limit = (OUTPUT_BASE_CHARS + OUTPUT_PER_CONTENT_CHAR * contents + OUTPUT_PER_MESSAGE * len(messages)
             + 2 * (len(bos_token) + len(eos_token)))
    context = dict(messages=list(messages), bos_token=bos_token, eos_token=eos_token,
                   add_generation_prompt=add_generation_prompt)
    if tools is not None:
        context["tools"] = tools
    try:
        text = render_bounded(compiled, context, output_chars=limit)
        if _LONE_SURROGATE.search(text):  # '\ud800' in a template's string: no UTF-8 for the tokenizer
            raise TemplateLimitError("its output holds a lone surrogate, which is no character")
        return text
    except (ChatTemplateError, RenderStopped):
        raise
    except TemplateLimitError as exc:
        raise ChatTemplateError(f"The chat template went over its limits: {_reason(exc)}") from None
    except Exception as exc:  # noqa: BLE001 — 1/0, 1+'a', recursion, undefined names, ...
        raise ChatTemplateError(f"The chat template failed: {_reason(exc)}") from None


def _json_size(value) -> int:
    return 0 if not value else len(json.dumps(value, ensure_ascii=False, default=str))


def chatml(messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
    """What ``CHATML`` renders, in plain Python: the fallback must not fail or time out."""
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


class ChatTokens(NamedTuple):
    tokens: list[int]
    left_out: int = 0  # earliest messages left out so the conversation fits the context
    notice: str = ""   # one line when the model's template failed and a built-in format stood in
    tools: ToolPlan | None = None  # how the reply is read for tool calls (tool_prompt.py)


class _ContentGuard:
    """Keeps text in message contents that reads like a control token from becoming one.

    Before rendering, each such text in a content (found the way llama.cpp finds it:
    by tokenizing the content with special tokens parsed) is swapped for a marker of
    private-use characters; after rendering, the markers are tokenized as plain text and
    everything between them (the template's scaffolding, the rest of the contents) as
    usual. A content without control text is left alone, so an ordinary chat tokenizes
    exactly as the template renders it. The markers carry a random number, so a user cannot forge one,
    and forging one would only make more text stay text.

    One guard per model (``_guard_for``): a chat's earlier messages come back with every
    reply, and their verdicts are remembered rather than tokenized again.
    """

    def __init__(self, model: ModelBackend) -> None:
        self._model = model
        nonce = f"{secrets.randbelow(10 ** 8):08d}"  # digits: templates that upper() contents keep them
        self._open, self._close = f"\ue000{nonce}:", "\ue001"
        self._marker = re.compile(re.escape(self._open) + r"(\d+)" + re.escape(self._close))
        self._texts: list[str] = []          # marker number -> the control text it stands for
        self._protected: OrderedDict[str, str] = OrderedDict()  # content -> content with markers
        self._special: dict[int, bool] = {}

    def protect(self, messages: Sequence[dict]) -> list[dict]:
        protected = [dict(m, content=self._protect(m["content"])) if isinstance(m.get("content"), str) else m
                     for m in messages]
        return [dict(m, tool_calls=self.protect_tree(m["tool_calls"])) if m.get("tool_calls") else m
                for m in protected]

    def protect_tree(self, value):
        """Every text in a JSON-like value (tools, calls' arguments), guarded as contents are."""
        if isinstance(value, str):
            return self._protect(value)
        if isinstance(value, dict):
            return {self.protect_tree(k): self.protect_tree(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.protect_tree(v) for v in value]
        return value

    def tokenize(self, text: str) -> list[int]:
        tokenize = self._model.tokenize
        if self._open not in text:
            return tokenize(text, add_special=False, parse_special=True)
        tokens: list[int] = []
        for index, piece in enumerate(self._marker.split(text)):
            if index % 2:
                tokens += tokenize(self._texts[int(piece)], add_special=False, parse_special=False)
            elif piece:
                tokens += tokenize(piece, add_special=False, parse_special=True)
        return tokens

    def _protect(self, content: str) -> str:
        protected = self._protected.get(content)
        if protected is None:
            # Half a UTF-16 pair is no character and has no UTF-8 to tokenize: '�' stands in.
            protected = self._swap(_LONE_SURROGATE.sub("\ufffd", content))
            if len(content) <= REMEMBERED_CONTENT_CHARS:
                self._protected[content] = protected
                if len(self._protected) > REMEMBERED_CONTENTS:
                    self._protected.popitem(last=False)
        else:
            self._protected.move_to_end(content)
        return protected

    def _swap(self, content: str) -> str:
        ids = set(self._model.tokenize(content, add_special=False, parse_special=True))
        texts = {self._model.token_text(t) for t in ids if self._is_special(t)}
        for text in sorted(texts, key=len, reverse=True):  # a longer control text may hold a shorter
            if text not in self._texts:
                self._texts.append(text)
            content = content.replace(text, f"{self._open}{self._texts.index(text)}{self._close}")
        return content

    def _is_special(self, token: int) -> bool:
        # A control token has text only when specials are rendered (no plain bytes of its
        # own); an unknown-token's plain form is a stand-in ('▅'). Ordinary tokens read the
        # same either way, or are bytes of a character split over tokens (not UTF-8 alone).
        known = self._special.get(token)
        if known is None:
            text, plain = self._model.token_text(token), self._model.token_bytes(token)
            known = bool(text) and plain != text.encode("utf-8") and _is_utf8(plain)
            self._special[token] = known
        return known


REMEMBERED_CONTENTS = 50_000          # verdicts kept per model: a long chat's messages
REMEMBERED_CONTENT_CHARS = 1_000_000  # longer contents are judged afresh (and rarely repeat)
_guards: WeakKeyDictionary = WeakKeyDictionary()


def _guard_for(model: ModelBackend) -> _ContentGuard:
    try:
        guard = _guards.get(model)
        if guard is None:
            guard = _guards[model] = _ContentGuard(model)
        return guard
    except TypeError:  # a model object that takes no weak references: a guard per prompt
        return _ContentGuard(model)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class _Prompter:
    """Messages -> tokens for one model, in its chat format (app/engine/prompting/chat_formats.py:
    the file's template or a built-in format) or (``template=False``) the built-in
    format a failed template falls back on."""

    def __init__(self, model: ModelBackend, guard: _ContentGuard | None = None, *, template: bool = True,
                 tools: ToolRequest | None = None) -> None:
        self.model = model
        self.guard = guard or _guard_for(model)
        self.format = chat_formats.format_of(model).name if template else chat_formats.fallback_format(model)
        self.template = model.chat_template if self.format is None else None
        self.tools = tools
        self.plan: ToolPlan | None = tool_plan(self.template, tools, render_chat)

    def tokens(self, messages: Sequence[dict]) -> list[int]:
        model = self.model
        bos = model.token_text(model.bos_id) if model.bos_id >= 0 else ""
        eos = model.token_text(model.eos_id) if model.eos_id >= 0 else ""
        messages, tools = prepare(messages, self.tools, self.template, render_chat)
        protected = self.guard.protect(messages)
        if self.format is None:
            text = render_chat(self.template, protected, bos_token=bos, eos_token=eos,
                               tools=None if tools is None else self.guard.protect_tree(tools))
        else:  # a built-in format: tools went into the system prompt (prepare, with no template)
            text = chat_formats.render_format(model, self.format, protected)
        if self.plan is not None:
            text += self.plan.prefill  # a forced call's opening: the reply goes on from it
        # Templates usually write the BOS themselves; add it only when they did not.
        add_bos = model.add_bos and not (bos and text.startswith(bos))
        tokens = self.guard.tokenize(text)
        return [model.bos_id, *tokens] if add_bos else tokens

    def fallback(self) -> _Prompter:
        return _Prompter(self.model, self.guard, template=False, tools=self.tools)


def template_notice(model: ModelBackend, error: ChatTemplateError) -> str:
    """One line: which file's template failed, why, and which built-in format stood in."""
    path = getattr(model, "path", None)
    name = Path(path).name if path else (model.name or "the model")
    name = name.encode("utf-8", "replace").decode("utf-8")  # a non-UTF-8 file name must still print
    reason = str(error)
    stand_in = chat_formats.format_words(chat_formats.fallback_format(model))
    return f"{name}: {reason[:1].lower()}{reason[1:]}; this reply used {stand_in} instead."


def template_error(template: str | None) -> str | None:
    """Why ``template`` cannot be used at all (too long, does not compile), or None."""
    compiled = _compile(template) if template else None
    return str(compiled) if isinstance(compiled, ChatTemplateError) else None


def chat_prompt(model: ModelBackend, messages: Sequence[dict]) -> ChatTokens:
    """Tokens of a conversation, ending with the assistant's turn opened (ChatML if the
    model's template fails, with the notice saying so)."""
    prompter = _Prompter(model)
    try:
        return ChatTokens(prompter.tokens(messages))
    except ChatTemplateError as exc:
        return ChatTokens(prompter.fallback().tokens(messages), 0, template_notice(model, exc))


def chat_tokens(model: ModelBackend, messages: Sequence[dict]) -> list[int]:
    """``chat_prompt``'s tokens; a fallback notice goes to the log (the terminal shows warnings)."""
    prompt = chat_prompt(model, messages)
    if prompt.notice:
        log.warning(prompt.notice)
    return prompt.tokens


def build_messages(history: Sequence[tuple[str, str] | dict], system_prompt: str = "") -> list[dict]:
    """[(role, text), ...] -> the messages list templates expect; a message given as a
    dict (an assistant's ``tool_calls``, a ``tool`` result) is taken as it is."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt.strip() else []
    messages += [item if isinstance(item, dict) else {"role": item[0], "content": item[1]} for item in history]
    return messages


def fit_conversation(history: Sequence[tuple[str, str]], system_prompt: str,
                     tokens_of: Callable[[list[dict]], list[int]], budget: int) -> tuple[list[int], int]:
    """The conversation's tokens, its oldest exchanges left out until it fits in
    ``budget`` tokens; returned with how many messages were left out.

    The system prompt and the newest message always stay: when they alone do not fit,
    the engine's context error says so. Messages go an exchange at a time, since
    many templates insist that turns alternate and start with the user.

    The fewest exchanges to leave out are found from the newest end: keep 1, 2, 4, 8, ...
    exchanges until a render no longer fits, then bisect between the last two. Each
    render costs time in the messages it holds, and none holds more than about twice
    what fits, so a chat of 50,000 messages costs what the few hundred that fit cost
    (plus one pass over the list), not a dozen renders of all of it. The answer is the
    one a search over every cut would give, for any template whose prompt grows with
    the messages it is given."""
    history = list(history)
    cuts = list(range(0, len(history) - 1, 2))
    if len(history) - 1 not in cuts:
        cuts.append(len(history) - 1)   # down to the newest message alone

    def tokens_after(index: int) -> list[int]:
        return tokens_of(build_messages(history[cuts[index]:], system_prompt))

    newest = len(cuts) - 1
    tokens = tokens_after(newest)
    if len(tokens) > budget or newest == 0:
        return tokens, max(0, cuts[newest])  # even the newest message alone is too long (or is all)
    fits, fitting = newest, tokens      # cuts[fits] fits; every cut before ``too_long`` does not
    too_long, step = -1, 1
    while fits > 0:
        probe = max(0, fits - step)
        candidate = tokens_after(probe)
        if len(candidate) > budget:
            too_long = probe
            break
        fits, fitting, step = probe, candidate, step * 2
    while fits - too_long > 1:          # the first cut that fits lies in (too_long, fits]
        middle = (too_long + fits) // 2
        candidate = tokens_after(middle)
        if len(candidate) <= budget:
            fits, fitting = middle, candidate
        else:
            too_long = middle
    return fitting, cuts[fits]


def conversation_prompt(model: ModelBackend, history: Sequence[tuple[str, str] | dict], system_prompt: str,
                        max_tokens: int, tools: ToolRequest | None = None) -> ChatTokens:
    """The chat as the model will see it, how many of its earliest messages were left
    out, and a notice when its template failed. Room is kept for the reply: its length
    limit, but at most half the context, so a generous limit does not push out the whole
    conversation. A template that fails on any render is dropped for the whole chat, so
    the cut is judged on one kind of prompt. ``tools``: the request's tools, rendered
    with the conversation (tool_prompt.py); the plan for reading the reply comes back."""
    budget = model.n_ctx - max(1, min(max_tokens, model.n_ctx // 2))
    prompter = _Prompter(model, tools=tools)
    try:
        return ChatTokens(*fit_conversation(history, system_prompt, prompter.tokens, budget), "", prompter.plan)
    except ChatTemplateError as exc:
        notice = template_notice(model, exc)
    fallback = prompter.fallback()
    return ChatTokens(*fit_conversation(history, system_prompt, fallback.tokens, budget), notice, fallback.plan)


def conversation_tokens(model: ModelBackend, history: Sequence[tuple[str, str]], system_prompt: str,
                        max_tokens: int) -> tuple[list[int], int]:
    """``conversation_prompt`` as (tokens, left out); a fallback notice goes to the log."""
    prompt = conversation_prompt(model, history, system_prompt, max_tokens)
    if prompt.notice:
        log.warning(prompt.notice)
    return prompt.tokens, prompt.left_out


def left_out_text(messages: int) -> str:
    return f"the {messages} earliest message{'s' if messages != 1 else ''} left out to fit the context"


def _reason(exc: BaseException) -> str:
    """An exception as a short line: its own words for ours, type and words otherwise."""
    text = str(exc) if isinstance(exc, (ChatTemplateError, TemplateLimitError)) else (
        f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    return _one_line(text)


def _one_line(text: object) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= REASON_CHARS else line[:REASON_CHARS - 1] + "…"
