"""One engine for every client: a thread that owns the loaded pair and runs jobs in
the order they arrived (batch 1).

llama.cpp contexts stay on the thread that made them, so the models are loaded on
this thread and every prompt is built and every reply written here. A job's output
goes back to its request's event loop through an ``asyncio.Queue``. A client that
goes away sets the job's ``cancel``: a queued job is skipped, a running one ends
within one speculative round (the engine checks the event before each round, and
this loop between tokens).

Consecutive requests share the target's KV cache: the engine keeps whatever prefix
of the new prompt the cache already holds (``SpeculativeEngine._prefill``), so an
agent that resends its history evaluates only what it added; clients taking turns each
find their conversation again (``prompt_cache``). Stop sequences are
matched here, on the reply's text, so a reply ends at its stop string without
writing one token more.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable

from app.engine.prompting.chat import RenderStopped
from app.engine.errors import ContextOverflowError
from app.engine.types import Stats, StopReason
from app.errors import TandemError
from app.server.errors import ApiError, server_error
from app.server.requests import JobSpec
from app.server.interleave import Interleave
from app.server.prompt_cache import PromptCache
from app.server.tools import CallItem, ToolReader
from app.server.structured import token_entry

log = logging.getLogger(__name__)

RECENT_REQUESTS = 200  # records kept for /tandem/requests (and a window's list)


@dataclass(frozen=True)
class Delta:
    """Reply text, and the kinds of the tokens that completed it (in order)."""

    text: str
    kinds: tuple[str, ...]
    logprobs: tuple = ()  # structured.TokenEntry per token, when the request asked for them


@dataclass
class Outcome:
    """How a job ended: its figures, for the final chunk and the request log."""

    finish_reason: str           # stop | length | cancelled
    completion_tokens: int
    prompt_tokens: int
    cached_tokens: int
    stats: Stats
    kinds: Counter
    arrival: int
    served: int
    queued_seconds: float
    speculation_refused: bool = False


@dataclass
class Job:
    """One request on its way through the engine. Made on the event loop's thread."""

    spec: JobSpec
    loop: asyncio.AbstractEventLoop
    id: str = ""
    cancel: threading.Event = field(default_factory=threading.Event)
    output: asyncio.Queue = field(default_factory=asyncio.Queue)
    arrival: int = 0
    enqueued: float = 0.0

    def push(self, item) -> None:
        """Hand ``item`` (Delta, CallItem, Outcome or ApiError) to the request's loop, from any thread."""
        try:
            self.loop.call_soon_threadsafe(self.output.put_nowait, item)
        except RuntimeError:  # the loop is gone (the server is shutting down)
            self.cancel.set()


class StopMatcher:
    """Finds the first stop sequence in a stream of text, holding back any tail that
    could be the start of one, so no part of a stop sequence is ever sent."""

    def __init__(self, stops) -> None:
        self.stops = [s for s in stops if s]
        self.held = ""

    def feed(self, text: str) -> tuple[str, bool]:
        if not self.stops:
            return text, False
        text = self.held + text
        found = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if found:
            self.held = ""
            return text[:min(found)], True
        keep = max((k for s in self.stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
        self.held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep], False

    def flush(self) -> str:
        held, self.held = self.held, ""
        return held


class JobRunner:
    """Numbers jobs as they arrive and runs each on the thread that owns the session;
    keeps the recent requests. Where the jobs wait is the subclass's: ``EngineWorker``
    has its own thread and queue, a window hands them to its engine thread."""

    # Conversations kept beside the cache's (``app/server/prompt_cache.py``), and short jobs
    # served while a long prompt is read (``app/server/interleave.py``): only where the
    # runner owns its session for good (a window's engine also chats and reloads).
    prompt_cache: PromptCache | None = None
    interleave: Interleave | None = None

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arrivals = itertools.count(1)
        self._served = itertools.count(1)
        self._jobs_by_arrival: dict[int, Job] = {}  # numbered, not yet done
        self.recent: deque[dict] = deque(maxlen=RECENT_REQUESTS)
        self.listeners: list[Callable[[dict], None]] = []  # told of each finished request (engine thread)

    def number(self, job: Job) -> None:
        """Call under ``_lock``, as the job joins its queue: arrival order is queue order."""
        job.arrival = next(self._arrivals)
        job.enqueued = time.perf_counter()
        self._jobs_by_arrival[job.arrival] = job

    def cancel_all(self, *, abandon: bool = False) -> None:
        """Stop the running job and every queued one. ``abandon`` (the server is going
        away): their clients are answered now (503), without waiting for the engine to
        reach its next round."""
        with self._lock:
            jobs = list(self._jobs_by_arrival.values())
        for job in jobs:
            job.cancel.set()
            if abandon:
                job.push(ApiError(503, "The server is shutting down.", code="server_shutting_down",
                                  kind="server_error"))

    def run(self, session, job: Job) -> None:
        """Serve ``job`` on ``session`` (on the session's own thread)."""
        try:
            if job.cancel.is_set():
                job.push(_skipped(job))
            else:
                self._run(session, job, next(self._served), self.interleave, self.prompt_cache)
        finally:
            with self._lock:
                self._jobs_by_arrival.pop(job.arrival, None)

    def _run(self, session, job: Job, served: int, interleave=None, prompt_cache=None) -> None:
        queued = time.perf_counter() - job.enqueued
        try:
            outcome = _reply(session, job, served, queued, interleave, prompt_cache)
        except RenderStopped:
            outcome = _skipped(job)
        except ContextOverflowError as exc:
            job.push(ApiError(400, str(exc), param="messages" if job.spec.kind == "chat" else "prompt",
                              code="context_length_exceeded"))
            return
        except TandemError as exc:
            job.push(ApiError(400, str(exc)))
            return
        except Exception as exc:  # noqa: BLE001 — the server stays up; the log has the traceback
            log.exception("request %s failed", job.id)
            job.push(server_error(f"The engine failed on this request: {type(exc).__name__}: {exc}"))
            return
        job.push(outcome)
        record = request_record(job, outcome)
        self.recent.append(record)
        for listener in list(self.listeners):
            try:
                listener(record)
            except Exception:  # noqa: BLE001 — a listener's fault is not the client's
                log.exception("request listener failed")


class HandedJobs(JobRunner):
    """Jobs handed, as they arrive, to a thread that owns a session elsewhere (a window's
    engine thread, or the engine process's): ``hand(serve)`` runs ``serve(session)``
    there, in turn with that thread's other work, with None for no model loaded."""

    def __init__(self, hand: Callable[[Callable], None]) -> None:
        super().__init__()
        self._hand = hand
        self._pending: list[Job] = []

    def submit(self, job: Job) -> None:
        with self._lock:
            self.number(job)
            self._pending.append(job)
        self._hand(lambda session: self._serve(session, job))

    def _serve(self, session, job: Job) -> None:
        with self._lock:
            self._pending.remove(job)
        if session is None:
            with self._lock:
                self._jobs_by_arrival.pop(job.arrival, None)
            job.push(ApiError(503, "The window has no model loaded.", code="model_not_loaded", kind="server_error"))
            return
        self.run(session, job)

    @property
    def waiting(self) -> int:
        return len(self._pending)


class EngineWorker(JobRunner):
    """Loads the pair on its own thread, then serves jobs first come, first served."""

    def __init__(self, load: Callable[[], object]) -> None:
        super().__init__()
        self._load = load
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._loaded = threading.Event()
        self._load_error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="tandem-engine", daemon=True)
        self.session = None
        self.prompt_cache = PromptCache()

    def start(self):
        """Load the models (on the worker thread) and return the loaded ``ChatSession``;
        a failed load raises its error here."""
        self._thread.start()
        self._loaded.wait()
        if self._load_error is not None:
            raise self._load_error
        return self.session

    def submit(self, job: Job) -> None:
        with self._lock:
            self.number(job)
            self._jobs.put(job)

    @property
    def waiting(self) -> int:
        return self._jobs.qsize()

    def stop(self, timeout: float = 10.0) -> None:
        self.cancel_all()
        self._jobs.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _main(self) -> None:
        try:
            self.session = self._load()
        except BaseException as exc:  # noqa: BLE001 — reported by start() on the caller's thread
            self._load_error = exc
            return
        finally:
            self._loaded.set()
        self.interleave = Interleave(self.session, self._waiting_job, lambda job: self.run(self.session, job))
        try:
            while (job := self._jobs.get()) is not None:
                self.run(self.session, job)
        finally:
            self.session.close()

    def _waiting_job(self) -> Job | None:
        """The next job in the queue, if one is waiting now (the stop signal stays put)."""
        try:
            job = self._jobs.get_nowait()
        except queue.Empty:
            return None
        if job is None:
            self._jobs.put(None)
        return job


def _skipped(job: Job) -> Outcome:
    return Outcome("cancelled", 0, 0, 0, Stats(), Counter(), job.arrival, 0, time.perf_counter() - job.enqueued)


def _reply(session, job: Job, served: int, queued: float, interleave=None, prompt_cache=None) -> Outcome:
    spec = job.spec
    if spec.kind == "chat":
        extra = {"tools": spec.tools} if spec.tools is not None else {}
        prompt = session.prompt(spec.history, spec.system, spec.max_tokens, job.cancel, **extra)
    else:
        from app.session.chat_types import ChatPrompt

        # The client wrote the whole prompt, its template included: its control tokens
        # ('<|im_start|>', an editor's '<|fim_prefix|>') are the model's, as in
        # llama-server's completions. (A chat's messages never are: the template escapes them.)
        prompt = ChatPrompt(session.target.tokenize(spec.prompt, add_special=True, parse_special=True))
    extra = {"grammar": spec.grammar, "logprobs": spec.logprobs} if spec.grammar or spec.logprobs is not None else {}
    plan = prompt.tools
    if plan is not None and spec.tools is not None and spec.tools.constrained:
        extra["tool_request"] = spec.tools
    inside = interleave is not None and interleave.inside
    if interleave is not None and not inside:
        extra["pause"] = interleave.pause
    if prompt_cache is not None and not inside and session.target.keeps_states:
        prompt_cache.before(session.target, prompt.tokens)  # another client's conversation, put back
    generation = session.generate(prompt, spec.sampling, spec.spec, spec.max_tokens, job.cancel, **extra)
    reader = ToolReader(plan, session.target, constrained="tool_request" in extra) if plan is not None else None
    matcher = StopMatcher(spec.stop)
    kinds: Counter = Counter()
    pending: list[str] = []
    entries: list = []  # the pending tokens' logprobs
    count, finish, offset = 0, None, 0
    events = iter(generation)
    try:
        for event in events:
            count += 1
            kinds[event.kind.value] += 1
            pending.append(event.kind.value)
            if spec.logprobs is not None:
                entries.append(token_entry(session.target, event, offset))
                offset += len(event.text)
            text, hit = matcher.feed(reader.text_of(event.id, event.text) if reader else event.text)
            if text and reader is None:
                job.push(Delta(text, tuple(pending), tuple(entries)))
                pending, entries = [], []
            elif text:
                pending, entries = _emit(job, reader.feed(text), pending, entries)
            if hit:
                finish = "stop"
                break
            if job.cancel.is_set():
                finish = "cancelled"
                break
            if reader is not None and reader.done:
                finish = "tool_calls"  # the one call wanted is whole: no need to write on
                break
        else:
            tail = matcher.flush()
            if reader is not None:
                pending, entries = _emit(job, reader.feed(tail) + reader.finish(), pending, entries)
                tail = ""
            if tail or pending:
                job.push(Delta(tail, tuple(pending), tuple(entries)))
                pending, entries = [], []
        if reader is not None and finish is not None:
            pending, entries = _emit(job, reader.finish(), pending, entries)
            if pending:
                job.push(Delta("", tuple(pending), tuple(entries)))
    finally:
        events.close()
    stats = generation.stats
    if finish is None:
        finish = {StopReason.EOS: "stop", StopReason.CANCELLED: "cancelled"}.get(stats.stop_reason, "length")
    if reader is not None and reader.made and finish == "stop":
        finish = "tool_calls"
    return Outcome(finish, count, stats.prompt_tokens, max(0, stats.prompt_tokens - stats.prompt_eval_tokens),
                   stats, kinds, job.arrival, served, queued, spec.speculation_refused)


def _emit(job: Job, items: list, pending: list[str], entries: list) -> tuple[list[str], list]:
    """Push a tool reader's content and calls, the kinds (and logprobs) so far with the
    first; what is left of them when nothing was pushed (text held back) is returned."""
    for item in items:
        job.push(Delta(item, tuple(pending), tuple(entries)) if isinstance(item, str) else
                 CallItem(item.index, item.id, item.call, tuple(pending)))
        pending, entries = [], []
    return pending, entries


def request_record(job: Job, outcome: Outcome) -> dict:
    """One line of the request log: what a list of served requests shows."""
    stats = outcome.stats
    seconds = stats.seconds
    return {
        "id": job.id, "kind": job.spec.kind, "arrival": outcome.arrival, "served": outcome.served,
        "finish_reason": outcome.finish_reason, "prompt_tokens": outcome.prompt_tokens,
        "cached_tokens": outcome.cached_tokens, "completion_tokens": outcome.completion_tokens,
        "tokens_per_second": round(outcome.completion_tokens / seconds, 3) if seconds > 0 else 0.0,
        "acceptance": round(stats.acceptance, 4), "speculative": stats.speculative,
        "token_kinds": dict(outcome.kinds), "queued_ms": round(outcome.queued_seconds * 1000, 1),
    }
