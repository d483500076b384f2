"""How many CPU threads each model runs with, chosen as it runs (Settings → threads 0).

llama.cpp's worker threads meet at a barrier after every operation of a step, so a
step runs at the pace of its slowest thread: with one core taken by another program,
two threads on two cores make each step wait for a core that is not there, and one
thread is about twice as fast (issue 16: 11.6 against 22.3 tokens/s on the demo pair).
Which count is best depends on what else runs, and that changes while a reply runs.

``ThreadChooser`` is a local search over thread counts driven by the step costs the
engine measures anyway. It compares windows of ``WINDOW`` steps, batch size by batch
size (a verification of 9 tokens is dearer than one of 2 whatever the load), so a
comparison is like with like:

- steady at n threads, each window is also set against the quiet baseline of n (the
  cheapest window seen at n, per batch size); steps ``SLOW`` times dearer than it say
  the machine got busy, and n - 1 is tried at once;
- every so often (``PROBE_EVERY`` steps, doubling after each probe that did not pay,
  up to ``PROBE_MOST``) a neighbour is tried, up first, so a machine that got quiet
  again gets its threads back, and down, so a machine busy from the start is found;
- a probe's window is kept when it is at least ``GAIN`` cheaper than the window just
  before it, else the count goes back.

Where the engine also gives each step's process CPU seconds, the window's CPU share
(CPU seconds over wall seconds times threads) says directly whether the threads had
their cores: about 1.0 on a quiet machine (llama.cpp's threads run or spin, never
sleep, inside a step), about 0.75 with two threads and one core taken by another
program (demo target, 2 cores). Under ``BUSY_SHARE`` one thread fewer is tried at
once, whatever the baseline says (a machine busy from the start needs no periodic
probe to be found); over ``QUIET_SHARE`` no probe down is made at all, neither
periodic nor for a slowdown (steps also get dearer as the context grows), so a quiet
machine pays nothing for the adaptive choice. A count's first window (the first
reply's start) is cut short after ``EARLY_STEPS`` when its share already says busy:
each of its steps costs two to three at the right count. In between (one busy core of eight
takes only an eighth of the share) the step costs decide as above. A probe set off by
the share is judged by the share first: where one thread fewer has its cores
again, it stays unless its steps measured dearer than before (the window before may
be a count's first two steps, too few to compare costs by). Where fewer threads do
not cure the share (a GPU that the threads wait for), it is judged by its costs like
any other probe, so it costs a window now and then, backing off the same way.

A probe *up* needs a free core to pay, and the process's own share cannot see one:
where the machine's idle time can be read (``machine_idle.py``, Linux), a probe up is
made only after a window in which at least ``IDLE_FOR_UP`` cores sat idle, so a
machine that stays busy costs no probes up at all (issue 25 measured a fifth of the
speed lost to them and to the first window), and one that gets quiet again is probed
at the next scheduled look.

The draft model has a chooser of its own; until it has judged a window of its own it
follows the target's moves (``ThreadChooser.follow``), so a reply's first draft after
plain replies runs at the count the target already found, not at the barrier's pace.

Thread counts change only what llama.cpp's matrix products split between threads, not
what they compute, so output is unchanged (tests/engine/speculation/test_thread_policy.py checks a
reply whose threads change mid-way against one that keeps them). ``FIXED`` is the
policy for an explicit thread count: it observes nothing and changes nothing.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Callable, Sequence

from app.engine.speculation.machine_idle import MachineIdle

WINDOW = 6            # steps per compared window
SLOW = 1.3            # a window this much dearer than the quiet baseline says: busy
GAIN = 0.93           # a probe is kept when its window costs at most this share of the last
PROBE_EVERY = 64      # steps between probes of a neighbouring count ...
PROBE_MOST = 768      # ... doubling after each probe that did not pay, up to this
BUSY_SHARE = 0.85     # a window whose threads got less of their cores than this: try one fewer
QUIET_SHARE = 0.92    # ... more than this: the threads had their cores, no probe down
EARLY_STEPS = 2       # a count's first window can be cut short by a low share after this many steps
IDLE_FOR_UP = 0.5     # idle cores (the machine's) a probe up needs: below it, the thread has no core

Window = dict[int, float]  # batch size -> median seconds


class ThreadChooser:
    """The thread count of one model, from the seconds of its steps at each count."""

    def __init__(self, most: int, least: int = 1, start: int | None = None,
                 idle: Callable[[], float | None] | None = None) -> None:
        self.most, self.least = max(1, most), max(1, min(least, most))
        self._idle = idle or (lambda: None)  # the machine's idle cores since the last window
        self.threads = min(max(start or self.most, self.least), self.most)
        self._window: dict[int, list[float]] = defaultdict(list)  # this window's seconds by batch
        self._filled = 0
        self._cpu = 0.0                # this window's CPU seconds, for its CPU share
        self._cpu_known = True         # every step of the window came with its CPU seconds
        self._share_wait = 0           # steps before the share may set off another probe down
        self._baseline: dict[int, Window] = {}       # threads -> cheapest medians seen, by batch
        # While probing: the count left, its last window, whether the CPU share set it off.
        self._probe: tuple[int, Window, bool] | None = None
        self._probe_every = PROBE_EVERY
        self._since_probe = 0
        self._next_up = True  # which neighbour the next periodic probe tries
        self.switches = 0

    def observe(self, batch: int, seconds: float, cpu_seconds: float | None = None) -> int | None:
        """One step of ``batch`` tokens took ``seconds`` at ``self.threads`` (and
        ``cpu_seconds`` of the process's CPU time, when measured); returns the thread
        count to switch to, or None to stay."""
        self._window[batch].append(seconds)
        self._filled += 1
        self._since_probe += 1
        if cpu_seconds is None:
            self._cpu_known = False
        else:
            self._cpu += cpu_seconds
        if self._filled < WINDOW and not self._cut_short():
            return None
        window = {b: _median(s) for b, s in self._window.items()}
        share = self._share()
        self._new_window()
        self._share_wait -= WINDOW
        idle = self._idle()
        chosen = self._judge_probe(window, share) if self._probe else self._steady(window, share, idle)
        if chosen is None or chosen == self.threads:
            return None
        self.threads = chosen
        self.switches += 1
        return chosen

    def follow(self, threads: int) -> int | None:
        """Take the count another model's chooser moved to, while this one has judged no
        window of its own (None: it keeps its count). The draft's steps reach its chooser
        only after each draft, all of them at the count it started with; a machine the
        target found busy is busy for the draft too, so the draft's first drafts need not
        pay a window at the barrier's pace to find it again."""
        threads = min(max(threads, self.least), self.most)
        if self._baseline or self._probe or threads == self.threads:
            return None
        self.threads = threads
        self._new_window()
        return threads

    def _new_window(self) -> None:
        self._window.clear()
        self._filled = 0
        self._cpu = 0.0
        self._cpu_known = True

    def _share(self) -> float | None:
        wall = sum(sum(s) for s in self._window.values())
        return self._cpu / (wall * self.threads) if self._cpu_known and wall > 0 else None

    def _cut_short(self) -> bool:
        """A count's first window (a reply's start, or a count just switched to) ends after
        ``EARLY_STEPS`` when the share already says busy: each step at a count whose
        threads lack a core costs two to three of the right count's."""
        if self._filled < EARLY_STEPS or self._probe or self.threads in self._baseline:
            return False
        share = self._share()
        return share is not None and share < BUSY_SHARE and self.threads > self.least

    def _steady(self, window: Window, share: float | None = None, idle: float | None = None) -> int | None:
        n = self.threads
        baseline = self._baseline.setdefault(n, dict(window))
        slowed = _ratio(window, baseline)
        for batch, seconds in window.items():
            baseline[batch] = min(seconds, baseline.get(batch, seconds))
        cores_taken = share is not None and share < BUSY_SHARE
        cores_ours = share is not None and share > QUIET_SHARE
        if cores_taken and n > self.least and self._share_wait <= 0:
            return self._start_probe(n - 1, window, by_share=True)
        if slowed is not None and slowed > SLOW and n > self.least and not cores_ours:
            return self._start_probe(n - 1, window)
        if self._since_probe < self._probe_every:
            return None
        # Up only where a core sat idle (when the machine says): a probe onto a taken core
        # costs a window at the barrier's pace and cannot pay.
        up = n + 1 <= self.most and (idle is None or idle >= IDLE_FOR_UP)
        down = n - 1 >= self.least and not cores_ours
        if not (up or down):
            return None
        go_up = up and (self._next_up or not down)
        self._next_up = not go_up
        return self._start_probe(n + 1 if go_up else n - 1, window)

    def _start_probe(self, threads: int, window: Window, by_share: bool = False) -> int:
        self._probe = (self.threads, window, by_share)
        self._since_probe = 0
        return threads

    def _judge_probe(self, window: Window, share: float | None) -> int | None:
        left, before, by_share = self._probe
        self._probe = None
        ratio = _ratio(window, before)
        # A probe the share set off is judged by the share first: where one thread fewer
        # got its cores back, it stays unless it measured dearer. Its costs alone would
        # often send it back, since the window it is set against may be a count's first
        # two steps (cheap by chance, or of other batch sizes), and under load every
        # step at the barrier's pace can cost many at the right count (issue 25's trace).
        cured = by_share and share is not None and share >= BUSY_SHARE
        if (ratio is not None and ratio <= GAIN) or (cured and (ratio is None or ratio <= 1.0)):
            self._probe_every = PROBE_EVERY  # the machine changed: look around sooner
            self._share_wait = 0
            baseline = self._baseline.setdefault(self.threads, dict(window))
            for batch, seconds in window.items():
                baseline[batch] = min(seconds, baseline.get(batch, seconds))
            return None
        self._probe_every = min(self._probe_every * 2, PROBE_MOST)
        if by_share:  # the share said busy and fewer threads did not pay: believe it less often
            self._share_wait = self._probe_every
        # The count left is as it was: its dearer steps are now its baseline, so the same
        # load does not set off the same probe again.
        self._baseline[left] = dict(before) if ratio is not None else self._baseline.get(left, {})
        return left


class AdaptiveThreads:
    """A chooser per adapting model (None: that model keeps its count), each applied
    through the model's ``set_threads``: target and draft are chosen separately, since
    a small draft may run best on fewer threads than its target. Until the draft's
    chooser has judged a window of its own, it follows the target's (``follow``)."""

    def __init__(self, target: ThreadChooser | None, apply_target: Callable[[int], None] | None,
                 draft: ThreadChooser | None = None, apply_draft: Callable[[int], None] | None = None) -> None:
        self.target, self._apply_target = target, apply_target
        self.draft, self._apply_draft = draft, apply_draft
        # Which steps' CPU seconds a chooser reads (the engine reads no clock for the others).
        self.reads_target_cpu = target is not None
        self.reads_draft_cpu = draft is not None

    def observe_verify(self, batch: int, seconds: float, cpu_seconds: float | None = None) -> None:
        if self.target is not None:
            chosen = self.target.observe(batch, seconds, cpu_seconds)
            if chosen is not None:
                self._apply_target(chosen)
                followed = self.draft.follow(chosen) if self.draft is not None else None
                if followed is not None:
                    self._apply_draft(followed)

    def observe_draft(self, step_seconds: Sequence[float], step_cpu: Sequence[float] | None = None) -> None:
        """A draft's step times (and CPU times); its first step (a batch of [d_k, bonus])
        counts apart."""
        if self.draft is None:
            return
        for i, seconds in enumerate(step_seconds):
            cpu = step_cpu[i] if step_cpu is not None and i < len(step_cpu) else None
            chosen = self.draft.observe(2 if i == 0 else 1, seconds, cpu)
            if chosen is not None:
                self._apply_draft(chosen)


class _FixedThreads:
    """An explicit thread count: nothing to choose."""

    reads_target_cpu = reads_draft_cpu = False

    def observe_verify(self, batch: int, seconds: float, cpu_seconds: float | None = None) -> None:
        pass

    def observe_draft(self, step_seconds: Sequence[float], step_cpu: Sequence[float] | None = None) -> None:
        pass


FIXED = _FixedThreads()


def threads_for(target, draft_model=None) -> AdaptiveThreads | _FixedThreads:
    """Adaptive threads for each model whose user left the count to the engine
    (``ThreadedBackend.adaptive_threads``); ``FIXED`` when neither did."""
    def chooser(model) -> tuple:
        if getattr(model, "adaptive_threads", False):
            return ThreadChooser(model.threads, idle=MachineIdle().idle), model.set_threads
        return None, None

    target_choice, draft_choice = chooser(target), chooser(draft_model)
    if target_choice[0] is None and draft_choice[0] is None:
        return FIXED
    return AdaptiveThreads(*target_choice, *draft_choice)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _ratio(window: Window, other: Window) -> float | None:
    """How much dearer ``window`` is than ``other``: the geometric mean of their ratios
    over the batch sizes both have; None when they share none."""
    shared = [b for b in window if b in other and other[b] > 0 and window[b] > 0]
    if not shared:
        return None
    return math.exp(sum(math.log(window[b] / other[b]) for b in shared) / len(shared))
