"""``ChatSession``: a loaded pair that turns conversations into replies."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Iterable, Sequence

from app.engine.prompting import chat_formats
from app.engine.prompting.chat import conversation_prompt, stop_renders_on, template_error
from app.engine.speculation.copy_sources import CopySources
from app.engine.types import COPY_MIN, SamplingConfig, SpecConfig
from app.session.chat_types import ChatPrompt, LoadInfo

if TYPE_CHECKING:
    from app.engine.speculation.speculative import Generation

__all__ = ["COPY_SOURCE_TOKENS", "ChatPrompt", "ChatSession", "LoadInfo"]

# Tokens of earlier text a session keeps to copy from (~100 bytes of index each).
COPY_SOURCE_TOKENS = 200_000


class ChatSession:
    """One loaded pair (``app.backends.loader.LoadedPair``) and what was loaded.

    Owned by one thread: llama.cpp contexts stay on the thread that made them.
    """

    def __init__(self, pair, info: LoadInfo) -> None:
        self.pair = pair
        self.engine = pair.engine
        self.target = pair.target
        self.info = info
        # What the user already has, for replies to copy from
        # (app/engine/speculation/copy_sources.py): bounded, oldest text goes first.
        self.copy_sources = CopySources(COPY_MIN, COPY_SOURCE_TOKENS)

    @property
    def compatibility(self):
        return self.pair.compatibility

    def set_chat_format(self, chosen: str = chat_formats.FILE_OWN) -> chat_formats.ChatFormat:
        """Write later prompts in ``chosen`` (a llama.cpp built-in format's name), or
        with '' in the file's own template, or the built-in format that fits when the
        file has none that works. Its notice, if any, is also in ``info``."""
        target = self.target
        chosen_format = chat_formats.choose_format(target, chosen,
                                                   template_error=template_error(target.chat_template))
        chat_formats.set_format(target, chosen_format)
        self.info = replace(self.info, chat_format=chosen_format.name or "", chat_format_notice=chosen_format.notice)
        return chosen_format

    def prompt(self, history: Sequence[tuple[str, str] | dict], system_prompt: str, max_tokens: int,
               cancel: threading.Event | None = None, tools=None) -> ChatPrompt:
        """The conversation as tokens, with room left for a reply of ``max_tokens``.

        The model's chat template runs here, bounded; setting ``cancel`` ends a render
        (``RenderStopped``), so Stop and quit work while a hostile template renders.
        ``tools``: an ``engine.prompting.tool_prompt.ToolRequest`` (the API's tool calls)."""
        with stop_renders_on(cancel):
            return ChatPrompt(*conversation_prompt(self.target, history, system_prompt, max_tokens, tools))

    def remember(self, texts: Iterable[str]) -> None:
        """Let later replies copy from ``texts``: the user's other conversations, earlier
        branches of an edited message. Each is tokenized once and indexed; past
        ``COPY_SOURCE_TOKENS`` the oldest go. Costs a tokenization per text: call it on
        this session's thread, between replies (the window's worker, not the UI thread)."""
        for text in texts:
            if text:
                self.copy_sources.add(self.target.tokenize(text, add_special=False, parse_special=False))

    def reply(self, history: Sequence[tuple[str, str]], sampling: SamplingConfig, spec: SpecConfig,
              max_tokens: int, *, system_prompt: str = "", cancel: threading.Event | None = None,
              replaced: Sequence[str] = ()) -> Generation:
        """One reply to ``history`` (ending with the user's turn), as a stream of token events.

        Iterate it for ``TokenEvent``s; its ``stats`` grow as it runs and say, at the end,
        how many early messages were left out to fit the context and whether the model's
        template failed (ChatML stood in). ``replaced``: the replies this one replaces
        (Regenerate passes the old reply), copied from first where they repeat."""
        prompt = self.prompt(history, system_prompt, max_tokens, cancel)
        return self.generate(prompt, sampling, spec, max_tokens, cancel, replaced=replaced)

    def generate(self, prompt: ChatPrompt, sampling: SamplingConfig, spec: SpecConfig, max_tokens: int,
                 cancel: threading.Event | None = None, *, replaced: Sequence[str] = (),
                 grammar: str = "", logprobs: int | None = None, tool_request=None, pause=None) -> Generation:
        """A reply to an already built prompt, its figures carrying what the prompt said.
        Copying repeats (``spec.copy_min``) also copies from what ``remember`` and
        ``replaced`` gave, the replaced replies first (added last, they win equal matches).
        ``grammar``: GBNF the reply must match (``app.backends.llama.grammar`` makes it from a
        JSON schema; a bad one raises GrammarError). ``tool_request``: the request's tools
        (``engine.prompting.tool_prompt.ToolRequest``), when the prompt's ``tools`` plan reads the reply
        for calls: its calls are constrained to the functions' schemas (``tool_grammar``),
        the whole reply when a call is forced, else from where the model opens one (a
        ``grammar`` given too wins then). ``logprobs``: each token event carries its
        log-probability and that many top alternatives. ``pause``: see
        ``SpeculativeEngine.generate``."""
        self.remember(replaced)
        plan = prompt.tools
        if tool_request is not None and plan is not None and (plan.forced or not grammar):
            constraint = self.tool_constraint(plan, tool_request)
        else:
            constraint = self.constraint(grammar) if grammar else None
        generation = self.engine.generate(prompt.tokens, sampling, spec, max_tokens, cancel,
                                          copy_sources=self.copy_sources, constraint=constraint,
                                          logprobs=logprobs, **({"pause": pause} if pause else {}))
        generation.stats.left_out = prompt.left_out
        generation.stats.prompt_notice = prompt.notice
        return generation

    def constraint(self, grammar: str):
        """``grammar`` (GBNF) compiled for the target's vocabulary, in its start state."""
        from app.backends.llama.grammar import GrammarConstraint

        return GrammarConstraint.compile(self.target, grammar)

    def tool_constraint(self, plan, request):
        """The constraint on a reply's tool calls (``app.backends.tool_grammar``)."""
        from app.backends.tool_grammar import tool_constraint

        return tool_constraint(self.target, plan, request)

    def self_test(self, gpu_name: str | None = None):
        """The ``--self-test`` checks on this pair (Help → Check speculation)."""
        from app.session.selftest import gpu_names, run_checks

        return run_checks(self.pair, gpu_names() if gpu_name is None else gpu_name)

    def close(self) -> None:
        self.pair.close()
