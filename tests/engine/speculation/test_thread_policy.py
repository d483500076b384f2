"""Adaptive threads: the chooser on synthetic step costs, and a real reply whose threads
change mid-way against one that keeps them (lossless)."""

from __future__ import annotations

import itertools

import pytest

from app.engine.speculation.thread_policy import (BUSY_SHARE, EARLY_STEPS, FIXED, PROBE_EVERY, PROBE_MOST, QUIET_SHARE, WINDOW,
                                      AdaptiveThreads, ThreadChooser, threads_for)

# Seconds per step of one token at each thread count, on a 2-core machine: quiet, two
# threads are fastest; with one core busy, two threads wait at every barrier.
QUIET = {1: 1.8, 2: 1.0}
ONE_CORE_BUSY = {1: 1.9, 2: 3.2}


def run(chooser: ThreadChooser, costs: dict[int, float], steps: int, batches=(1,)) -> list[int]:
    """Feed ``steps`` steps costing ``costs[threads] * batch factor``; the counts it ran at."""
    seen = []
    sizes = itertools.cycle(batches)
    for _ in range(steps):
        batch = next(sizes)
        seen.append(chooser.threads)
        chooser.observe(batch, costs[chooser.threads] * (1 + 0.2 * (batch - 1)))
    return seen


def test_quiet_stays_busy_drops_quiet_again_returns():
    chooser = ThreadChooser(2)
    quiet = run(chooser, QUIET, 400)
    assert chooser.threads == 2
    assert quiet.count(1) <= 2 * WINDOW  # a probe down or two (backing off), each one window long

    busy = run(chooser, ONE_CORE_BUSY, 400)
    assert chooser.threads == 1
    assert busy.index(1) <= 2 * WINDOW  # the slowdown is seen within a window or two
    # probes back up (which do not pay while busy) back off: most busy steps run on 1
    assert busy.count(2) / len(busy) < 0.12

    quiet_again = run(chooser, QUIET, PROBE_MOST + 4 * WINDOW)
    assert chooser.threads == 2
    assert quiet_again[-WINDOW:] == [2] * WINDOW


def test_busy_from_the_start_is_found_by_a_probe_down():
    chooser = ThreadChooser(2)
    seen = run(chooser, ONE_CORE_BUSY, 300)
    assert chooser.threads == 1
    assert seen.count(2) / len(seen) < 0.4


def test_batch_sizes_are_compared_like_with_like():
    """Mixed verification sizes, each dearer than the last, do not read as a slowdown."""
    chooser = ThreadChooser(4)
    costs = {n: 1.0 / n for n in range(1, 5)}  # more threads always faster
    seen = run(chooser, costs, 600, batches=(1, 9, 3, 5, 2))
    assert chooser.threads == 4
    assert seen.count(4) / len(seen) > 0.85


def test_a_machine_with_more_cores_steps_down_one_at_a_time():
    """Eight threads, one core busy: seven is the best count, and the search stops there."""
    costs = {n: 1.0 / n for n in range(1, 9)}
    costs[8] = 3.0  # the barrier waits for the busy core
    chooser = ThreadChooser(8)
    run(chooser, {n: 1.0 / n for n in range(1, 9)}, 100)
    run(chooser, costs, 600)
    assert chooser.threads == 7


def test_adaptive_threads_applies_each_models_choice_separately():
    """The target's steps slow down, the draft's do not: only the target drops a thread."""
    applied = {"target": [], "draft": []}
    threads = AdaptiveThreads(ThreadChooser(2), applied["target"].append,
                              ThreadChooser(2), applied["draft"].append)
    for step in range(20 * WINDOW):
        busy = step >= WINDOW
        threads.observe_verify(1, ONE_CORE_BUSY[threads.target.threads] if busy else QUIET[threads.target.threads])
        threads.observe_draft([0.1, 0.05, 0.05])
    assert applied["target"][0] == 1 and threads.target.threads == 1
    assert threads.draft.threads == 2 and set(applied["draft"]) <= {1, 2}


def test_an_explicit_count_is_left_alone():
    class Fixed:
        adaptive_threads = False
        threads = 2

    class Adaptive(Fixed):
        adaptive_threads = True

        def set_threads(self, n):
            self.threads = n

    assert threads_for(Fixed(), None) is FIXED
    assert threads_for(Fixed(), Fixed()) is FIXED
    only_draft = threads_for(Fixed(), Adaptive())
    assert only_draft.target is None and only_draft.draft.threads == 2


# The process's CPU share of each step (CPU seconds / wall seconds / threads), as measured
# on the demo target with 2 cores: quiet, llama.cpp's threads run or spin through a step;
# with one core taken, two threads get about three quarters of theirs, one gets all of it.
QUIET_CPU = {1: 1.0, 2: 0.99}
BUSY_CPU = {1: 1.0, 2: 0.74}


def run_measured(chooser: ThreadChooser, costs: dict[int, float], shares: dict[int, float],
                 steps: int, batches=(1,), growth: float = 0.0) -> list[int]:
    """As ``run``, each step also giving its CPU seconds; ``growth``: each step that much
    dearer than the one before (a context getting longer)."""
    seen = []
    sizes = itertools.cycle(batches)
    for step in range(steps):
        batch, n = next(sizes), chooser.threads
        seen.append(n)
        seconds = costs[n] * (1 + 0.2 * (batch - 1)) * (1 + growth) ** step
        chooser.observe(batch, seconds, seconds * n * shares[n])
    return seen


def test_a_quiet_machine_with_cpu_times_is_never_probed_down():
    """The CPU share says every thread had its core: no periodic probe down, and steps
    getting dearer as the context grows (4x over the run) set off none either."""
    chooser = ThreadChooser(2)
    seen = run_measured(chooser, QUIET, QUIET_CPU, 2000, batches=(1, 5, 9), growth=0.0007)
    assert seen == [2] * 2000 and chooser.switches == 0
    # Without CPU times the same steps do cost probes: what the share saves.
    blind = ThreadChooser(2)
    assert run(blind, QUIET, 2000).count(1) > 0


def test_busy_from_the_start_is_seen_in_the_first_steps_by_the_cpu_share():
    chooser = ThreadChooser(2)
    seen = run_measured(chooser, ONE_CORE_BUSY, BUSY_CPU, 300)
    # The first window is cut short: two steps at the barrier's pace, not six.
    assert seen[:EARLY_STEPS] == [2] * EARLY_STEPS and seen[EARLY_STEPS:EARLY_STEPS + WINDOW] == [1] * WINDOW
    assert chooser.threads == 1
    assert seen.count(2) / len(seen) < 0.1  # against < 0.4 without CPU times


class Idle:
    """The machine's idle cores, as ``MachineIdle.idle`` gives them, set by the test."""

    def __init__(self, cores: float | None) -> None:
        self.cores = cores
        self.asked = 0

    def __call__(self) -> float | None:
        self.asked += 1
        return self.cores


def test_a_machine_that_stays_busy_costs_no_probes_up():
    """One thread on the free core, the other taken: no core sits idle, so the periodic
    probe up (a window at the barrier's pace each time) is never made."""
    idle = Idle(0.02)
    chooser = ThreadChooser(2, idle=idle)
    seen = run_measured(chooser, ONE_CORE_BUSY, BUSY_CPU, 3000)
    assert seen[EARLY_STEPS:] == [1] * (3000 - EARLY_STEPS) and idle.asked > 100
    blind = ThreadChooser(2)  # the machine's idle time unknown: probes up, backing off
    assert run_measured(blind, ONE_CORE_BUSY, BUSY_CPU, 3000).count(2) > EARLY_STEPS


def test_a_core_that_comes_free_is_used_again_at_the_next_look():
    idle = Idle(0.0)
    chooser = ThreadChooser(2, idle=idle)
    run_measured(chooser, ONE_CORE_BUSY, BUSY_CPU, 2000)
    assert chooser.threads == 1
    idle.cores = 0.97  # the other program ended: its core sits idle
    quiet = run_measured(chooser, QUIET, QUIET_CPU, PROBE_EVERY + 2 * WINDOW)
    assert chooser.threads == 2 and quiet[-WINDOW:] == [2] * WINDOW


def test_machine_idle_reads_the_allowed_cpus_of_proc_stat(tmp_path):
    from app.engine.speculation.machine_idle import MIN_JIFFIES, MachineIdle

    stat = tmp_path / "stat"

    def write(cpu0, cpu1):
        stat.write_text("cpu  1 2 3 4 5 6 7 8 0 0\n" + "".join(
            f"cpu{i} {busy} 0 0 {free} 0 0 0 0 0 0\n" for i, (busy, free) in enumerate((cpu0, cpu1)))
            + "intr 1 2 3\n")

    write((100, 100), (100, 100))
    idle = MachineIdle(str(stat), cpus={0, 1})
    write((100 + 50, 100 + 50), (100 + 100, 100))  # cpu0 half idle, cpu1 all busy
    assert idle.idle() == pytest.approx(0.5)
    write((150 + MIN_JIFFIES - 1, 150), (200, 100))  # too short a look to tell: the last answer ...
    assert idle.idle() == pytest.approx(0.5)
    write((150 + 40, 150 + 40), (200, 100 + 80))  # ... and counted from the last real look
    assert idle.idle() == pytest.approx(1.5)
    only_cpu1 = MachineIdle(str(stat), cpus={1})
    write((190 + 100, 190 + 100), (200 + 100, 180))
    assert only_cpu1.idle() == pytest.approx(0.0)  # cpu0's idle is another container's
    fresh = MachineIdle(str(stat), cpus={0, 1})
    assert fresh.idle() is None  # too short a first look: nothing to answer yet
    assert MachineIdle(str(tmp_path / "missing")).idle() is None
    stat.write_text("cpu0 a b c\n")
    assert MachineIdle(str(stat)).idle() is None


def test_windows_that_come_too_soon_to_read_the_machine_make_no_probe_up(tmp_path):
    """The draft's steps reach its chooser all at once after each draft, so its windows
    can end microseconds apart, too soon for /proc/stat to tell (issue 25's trace: each
    such look read as "unknown" and set off a probe up onto the taken core). The last
    look that could tell (no core idle) still answers."""
    from app.engine.speculation.machine_idle import MachineIdle

    stat = tmp_path / "stat"
    stat.write_text("cpu0 100 0 0 100 0 0 0 0\ncpu1 100 0 0 100 0 0 0 0\n")
    idle = MachineIdle(str(stat), cpus={0, 1})
    stat.write_text("cpu0 200 0 0 100 0 0 0 0\ncpu1 200 0 0 100 0 0 0 0\n")  # both cores busy
    assert idle.idle() == pytest.approx(0.0)
    chooser = ThreadChooser(2, idle=idle.idle)  # from here every look comes too soon
    seen = run_measured(chooser, ONE_CORE_BUSY, BUSY_CPU, 3000)
    assert seen[EARLY_STEPS:] == [1] * (3000 - EARLY_STEPS)


def test_the_draft_follows_the_target_until_it_has_judged_a_window_of_its_own():
    """A spec reply after plain ones: the target found the machine busy, so the draft's
    first draft runs at the target's count, not at the barrier's pace."""
    applied = {"target": [], "draft": []}
    threads = AdaptiveThreads(ThreadChooser(2, idle=Idle(0.0)), applied["target"].append,
                              ThreadChooser(2, idle=Idle(0.0)), applied["draft"].append)
    for _ in range(4 * WINDOW):  # plain steps only: the draft sees none
        n = threads.target.threads
        threads.observe_verify(1, ONE_CORE_BUSY[n], ONE_CORE_BUSY[n] * n * BUSY_CPU[n])
    assert threads.target.threads == 1
    assert applied["draft"] == [1] and threads.draft.threads == 1
    for _ in range(4):  # its own windows now: it keeps what it measured
        threads.observe_draft([0.1] * WINDOW, [0.1] * WINDOW)
    before = list(applied["draft"])
    assert threads.draft.follow(2) is None and applied["draft"] == before


def test_quiet_busy_quiet_with_cpu_times():
    chooser = ThreadChooser(2)
    run_measured(chooser, QUIET, QUIET_CPU, 200)
    busy = run_measured(chooser, ONE_CORE_BUSY, BUSY_CPU, 400)
    assert busy.index(1) <= WINDOW and chooser.threads == 1
    assert busy.count(2) / len(busy) < 0.1
    quiet_again = run_measured(chooser, QUIET, QUIET_CPU, PROBE_MOST + 4 * WINDOW)
    assert chooser.threads == 2 and quiet_again[-WINDOW:] == [2] * WINDOW


def test_a_low_share_that_fewer_threads_do_not_cure_backs_off():
    """Threads that wait for something else (a GPU) show a low share, but one thread
    fewer is no cheaper: the probes it sets off become rare, and the count stays."""
    chooser = ThreadChooser(2)
    seen = run_measured(chooser, QUIET, {1: 0.3, 2: 0.3}, 3000)
    assert chooser.threads == 2
    assert seen.count(1) / len(seen) < 0.05
    assert 0 < BUSY_SHARE < QUIET_SHARE < 1


def test_changing_threads_mid_reply_keeps_the_reply(q41_target, q40_draft):
    """Greedy, demo pair: a reply whose threads go 2 -> 1 -> 2 (target) and 1 -> 2 (draft)
    mid-way is token for token the reply with fixed threads."""
    from app.engine.prompting.chat import build_messages, chat_tokens
    from app.engine.speculation.drafters import ModelDrafter
    from app.engine.speculation.speculative import SpeculativeEngine
    from app.engine.types import SamplingConfig, SpecConfig

    prompt = chat_tokens(q41_target, build_messages([("user", "Write a short story about a lighthouse keeper.")]))
    greedy, spec = SamplingConfig(), SpecConfig(draft_max=4, copy_min=6)
    engine = SpeculativeEngine(q41_target, ModelDrafter(q40_draft, q41_target.n_vocab))
    q41_target.set_threads(2), q40_draft.set_threads(2)
    engine.threads = FIXED
    fixed = [e.id for e in engine.generate(prompt, greedy, spec, 48).run()]

    class Switching:
        """Switches each model's threads every few steps, as a busy machine would make
        the chooser do."""

        reads_target_cpu = reads_draft_cpu = True  # as a chooser that reads CPU time

        def __init__(self):
            self.steps = 0
            self.seen = set()

        def observe_verify(self, batch, seconds, cpu_seconds=None):
            self.steps += 1
            q41_target.set_threads(1 if (self.steps // 3) % 2 else 2)
            self.seen.add(("target", q41_target.threads))

        def observe_draft(self, step_seconds, step_cpu=None):
            q40_draft.set_threads(2 if (self.steps // 2) % 2 else 1)
            self.seen.add(("draft", q40_draft.threads))

    engine = SpeculativeEngine(q41_target, ModelDrafter(q40_draft, q41_target.n_vocab))
    engine.threads = switching = Switching()
    q41_target.trim(0), q40_draft.trim(0)  # a cold start, like the fixed run's
    switched = [e.id for e in engine.generate(prompt, greedy, spec, 48).run()]
    q41_target.set_threads(2), q40_draft.set_threads(2)
    assert switching.seen == {("target", 1), ("target", 2), ("draft", 1), ("draft", 2)}
    assert switched == fixed

    plain_fixed = [e.id for e in SpeculativeEngine(q41_target).generate(prompt, greedy, SpecConfig(enabled=False), 32).run()]
    plain = SpeculativeEngine(q41_target)
    plain.threads = Switching()
    q41_target.trim(0)
    assert [e.id for e in plain.generate(prompt, greedy, SpecConfig(enabled=False), 32).run()] == plain_fixed
    q41_target.set_threads(2)


@pytest.mark.parametrize("n", [1, 3])
def test_backend_set_threads_is_what_llama_cpp_runs_with(q41_target, n):
    import llama_cpp as ll

    before = q41_target.threads
    q41_target.set_threads(n)
    try:
        assert ll.llama_n_threads(q41_target._ctx) == n == ll.llama_n_threads_batch(q41_target._ctx)
        assert q41_target.threads == n
    finally:
        q41_target.set_threads(before)


def test_a_probe_the_share_set_off_stays_where_fewer_threads_get_their_cores():
    """Measured under `yes > /dev/null` (issue 25): one thread is often only a little
    cheaper than two at the barrier's pace, less than GAIN, so costs alone sent the probe
    back to two threads for a long wait. One thread has its core again (share 1.0) and
    is not dearer: it stays, from the first probe on."""
    close = {1: 1.9, 2: 2.0}
    chooser = ThreadChooser(2, idle=Idle(0.0))
    seen = run_measured(chooser, close, BUSY_CPU, 600)
    assert seen[:EARLY_STEPS] == [2] * EARLY_STEPS and seen[EARLY_STEPS:] == [1] * (600 - EARLY_STEPS)
    # The same probe in batches the first window never had (nothing to compare): kept too.
    chooser = ThreadChooser(2, idle=Idle(0.0))
    sizes = iter([1, 1] + [3] * 100)
    for batch in sizes:
        n = chooser.threads
        chooser.observe(batch, close[n], close[n] * n * BUSY_CPU[n])
    assert chooser.threads == 1 and chooser.switches == 1


def test_a_probe_the_share_set_off_still_goes_back_where_fewer_threads_are_dearer():
    """The share is low, one thread fewer gets its cores, but its steps cost more (more
    cores than the one taken were doing useful work): the costs win, and the count goes back."""
    chooser = ThreadChooser(2, idle=Idle(0.0))
    seen = run_measured(chooser, {1: 2.6, 2: 2.0}, BUSY_CPU, 600)
    assert chooser.threads == 2 and seen.count(1) / len(seen) < 0.1


def test_cpu_clocks_are_read_only_where_a_chooser_uses_them(q41_target, q40_draft):
    """Each reading of the process's CPU clock is a system call on a virtual machine:
    an explicit thread count (or a model whose count is fixed) reads none."""
    from app.engine.speculation.drafters import ModelDrafter
    from app.engine.speculation.speculative import SpeculativeEngine
    from app.engine.types import SamplingConfig, SpecConfig

    class Recording:
        def __init__(self, target: bool, draft: bool):
            self.reads_target_cpu, self.reads_draft_cpu = target, draft
            self.verify, self.draft = [], []

        def observe_verify(self, batch, seconds, cpu_seconds=None):
            self.verify.append(cpu_seconds)

        def observe_draft(self, step_seconds, step_cpu=None):
            self.draft.append(list(step_cpu or []))

    prompt = q41_target.tokenize("The lighthouse keeper", add_special=True, parse_special=False)
    for target, draft in ((False, False), (True, False), (False, True), (True, True)):
        engine = SpeculativeEngine(q41_target, ModelDrafter(q40_draft, q41_target.n_vocab))
        engine.threads = recording = Recording(target, draft)
        engine.generate(prompt, SamplingConfig(), SpecConfig(draft_max=4, copy_min=0), 16).run()
        assert recording.verify and recording.draft
        assert all((cpu is not None) == target for cpu in recording.verify)
        assert any(recording.draft) == draft
    assert not FIXED.reads_target_cpu and not FIXED.reads_draft_cpu
