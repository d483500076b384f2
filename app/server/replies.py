"""The response shapes: OpenAI's (``chat.completion``, ``text_completion`` and their
chunks, ``usage`` with ``prompt_tokens_details.cached_tokens``), plus what the engine
knows — a ``tandem`` object and llama-server's ``timings`` — so tools that read either
find their figures."""

from __future__ import annotations

from app.server.structured import chat_logprobs, completion_logprobs
from app.server.worker import Delta, Outcome

FINGERPRINT = "tandem"


def usage(outcome: Outcome) -> dict:
    return {"prompt_tokens": outcome.prompt_tokens, "completion_tokens": outcome.completion_tokens,
            "total_tokens": outcome.prompt_tokens + outcome.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": outcome.cached_tokens}}


def tandem_figures(outcome: Outcome) -> dict:
    stats = outcome.stats
    tokens, rounds, seconds = outcome.completion_tokens, stats.rounds, stats.seconds
    if stats.speculative:
        reason = ""
    elif outcome.speculation_refused:
        reason = "off for this request"
    else:
        reason = stats.note
    return {
        "drafted": stats.drafted, "accepted": stats.accepted, "acceptance": round(stats.acceptance, 4),
        "copied": stats.copied, "rounds": rounds,
        "tokens_per_round": round(tokens / rounds, 4) if rounds else 0.0,
        "tokens_per_second": round(tokens / seconds, 3) if seconds > 0 else 0.0,
        "speculative": stats.speculative, "speculative_reason": reason,
        "prompt_reused": outcome.cached_tokens, "left_out_messages": stats.left_out,
        "prompt_notice": stats.prompt_notice, "token_kind_counts": dict(outcome.kinds),
        "request": {"arrival": outcome.arrival, "served": outcome.served,
                    "queued_ms": round(outcome.queued_seconds * 1000, 1)},
    }


def timings(outcome: Outcome) -> dict:
    """llama-server's ``timings`` object, the same names and meanings."""
    stats = outcome.stats
    prompt_n = max(0, stats.prompt_tokens - outcome.cached_tokens)
    prompt_ms, predicted_ms = stats.prompt_seconds * 1000, stats.seconds * 1000
    return {
        "cache_n": outcome.cached_tokens,
        "prompt_n": prompt_n, "prompt_ms": round(prompt_ms, 3),
        "prompt_per_token_ms": round(prompt_ms / prompt_n, 3) if prompt_n else 0.0,
        "prompt_per_second": round(prompt_n / prompt_ms * 1000, 3) if prompt_ms > 0 else 0.0,
        "predicted_n": outcome.completion_tokens, "predicted_ms": round(predicted_ms, 3),
        "predicted_per_token_ms": round(predicted_ms / outcome.completion_tokens, 3) if outcome.completion_tokens else 0.0,
        "predicted_per_second": round(outcome.completion_tokens / predicted_ms * 1000, 3) if predicted_ms > 0 else 0.0,
        "draft_n": stats.drafted, "draft_n_accepted": stats.accepted,
    }


class Shapes:
    """The objects of one response, chat or completion, streamed or whole."""

    def __init__(self, kind: str, request_id: str, model: str, created: int) -> None:
        self.chat = kind == "chat"
        self.id, self.model, self.created = request_id, model, created
        self.object = "chat.completion" if self.chat else "text_completion"

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": FINGERPRINT}

    def whole(self, text: str, outcome: Outcome, calls=(), logprobs=None) -> dict:
        shown = None if logprobs is None else self._logprobs(logprobs)
        if self.chat:
            message = {"role": "assistant", "content": text}
            if calls:  # tools.CallItem: OpenAI gives no content beside calls unless there was some
                message = {"role": "assistant", "content": text or None, "tool_calls": [c.openai() for c in calls]}
            choice = {"index": 0, "message": message, "logprobs": shown, "finish_reason": outcome.finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": shown, "finish_reason": outcome.finish_reason}
        return {**self._head(self.object), "choices": [choice], "usage": usage(outcome),
                "tandem": tandem_figures(outcome), "timings": timings(outcome)}

    def _chunk(self, content: str | None, finish: str | None, *, role: bool = False) -> dict:
        if self.chat:
            delta = {"role": "assistant", "content": ""} if role else ({} if content is None else {"content": content})
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {**self._head("chat.completion.chunk"), "choices": [choice]}
        choice = {"index": 0, "text": content or "", "logprobs": None, "finish_reason": finish}
        return {**self._head("text_completion"), "choices": [choice]}

    def opening(self) -> dict | None:
        return self._chunk(None, None, role=True) if self.chat else None

    def _logprobs(self, entries) -> dict:
        return chat_logprobs(entries) if self.chat else completion_logprobs(entries)

    def delta(self, delta: Delta, token_kinds: bool, logprobs: bool = False) -> dict:
        chunk = self._chunk(delta.text, None)
        if logprobs:
            chunk["choices"][0]["logprobs"] = self._logprobs(delta.logprobs)
        if token_kinds:
            chunk["tandem"] = {"token_kinds": list(delta.kinds)}
        return chunk

    def call_chunks(self, item, token_kinds: bool) -> list[dict]:
        """A whole tool call (tools.CallItem) as OpenAI streams one: a chunk with its id,
        type and name, then one with its arguments."""
        chunks = []
        for piece in item.chunks():
            chunk = self._chunk(None, None)
            chunk["choices"][0]["delta"] = {"tool_calls": [piece]}
            chunks.append(chunk)
        if token_kinds:
            chunks[0]["tandem"] = {"token_kinds": list(item.kinds)}
            chunks[1]["tandem"] = {"token_kinds": []}
        return chunks

    def closing(self, outcome: Outcome) -> dict:
        chunk = self._chunk(None, outcome.finish_reason)
        chunk["tandem"] = tandem_figures(outcome)
        chunk["timings"] = timings(outcome)
        return chunk

    def usage_chunk(self, outcome: Outcome) -> dict:
        return {**self._head("chat.completion.chunk" if self.chat else "text_completion"), "choices": [],
                "usage": usage(outcome)}
