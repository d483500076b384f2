"""The round loop speaks to every drafter through one interface and never asks which
kind it holds: a drafter written here, that the engine has never seen, drafts through it
losslessly, hears what was kept, rides its own nodes in the batch and leaves its note."""

from __future__ import annotations

import ast
import inspect
import textwrap

import numpy as np

from app.engine.speculation import speculative
from app.engine.speculation.draft import Draft
from app.engine.speculation.drafter_interface import DrafterDefaults, RoundOutcome
from app.engine.speculation.lookahead import LookaheadRound
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.speculation.token_tree import TokenTree
from app.engine.types import DrafterKind, SamplingConfig, SpecConfig, Stats

from markov_backend import MarkovBackend

ROUND_METHODS = ("_run", "_draft", "_guess", "_verify", "_accept", "_account", "_copy", "_prefill")


def kind_tests(source: str) -> list[str]:
    """The places in ``source`` that ask what something is: ``isinstance``, ``hasattr``,
    ``getattr`` and ``type`` calls, and any mention of a drafter's kind."""
    found = []
    for node in ast.walk(ast.parse(textwrap.dedent(source))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                "isinstance", "hasattr", "getattr", "type", "issubclass"):
            found.append(f"{node.func.id}() at line {node.lineno}")
        elif isinstance(node, ast.Attribute) and node.attr == "kind":
            found.append(f".kind at line {node.lineno}")
        elif isinstance(node, ast.Name) and node.id in ("DrafterKind", "TextBridge", "LookaheadDrafter",
                                                        "ModelDrafter"):
            found.append(f"{node.id} at line {node.lineno}")
    return found


def test_the_round_never_asks_what_drafts():
    methods = [getattr(SpeculativeEngine, name) for name in ROUND_METHODS]
    assert {name: kind_tests(inspect.getsource(method)) for name, method in zip(ROUND_METHODS, methods)} == {
        name: [] for name in ROUND_METHODS}


def test_the_check_finds_a_kind_test():
    source = '''
def _run(self):
    if isinstance(self.drafter, TextBridge) or self.drafter.kind is DrafterKind.LOOKAHEAD:
        hasattr(self.drafter, "cpu_clock")
'''
    assert sorted(kind_tests(source)) == [".kind at line 3", "DrafterKind at line 3", "TextBridge at line 3",
                                          "hasattr() at line 4", "isinstance() at line 3"]


class _Rider:
    """One extra node under the root: the token after the last, as the drafter guesses."""

    width = 1

    def __init__(self, drafter: "_OracleDrafter") -> None:
        self.drafter = drafter

    def shape(self, last: int, draft: Draft) -> LookaheadRound:
        tree = TokenTree.rooted_at(last)
        tree.add_path(0, draft.tokens)
        guesses = len(tree) - 1
        tree.add_path(0, [(last + 1) % self.drafter.vocab])
        return LookaheadRound(tree, draft, {}, guesses)

    def advance(self, rows: np.ndarray, emitted: int) -> None:
        self.drafter.rides += 1


class _OracleDrafter(DrafterDefaults):
    """Proposes the target's own greedy continuation, wrong at every third token; asks for
    a rider every other round."""

    kind = DrafterKind.MODEL

    def __init__(self, logits: np.ndarray) -> None:
        self.logits, self.vocab = logits, len(logits)
        self.seconds = 0.0
        self.outcomes: list[RoundOutcome] = []
        self.rolled_back_to: list[int] = []
        self.rides = 0
        self._asked = 0

    def prepare(self, context) -> None:
        pass

    def rider(self, room, branches, plain_seconds):
        self._asked += 1
        return _Rider(self) if self._asked % 2 and branches > self.vocab and room > 1 else None

    def propose(self, context, n_max, sampling, rng, p_min, go_on=None, constraint=None, branch=None, lines=1):
        tokens, last = [], context[-1]
        for i in range(n_max):
            last = int(np.argmax(self.logits[last]))
            tokens.append((last + 1) % self.vocab if i % 3 == 2 else last)
        return Draft(tokens=tokens, probs=[1.0] * len(tokens))

    def observe(self, outcome: RoundOutcome, stats: Stats) -> None:
        self.outcomes.append(outcome)

    def roll_back(self, committed) -> None:
        self.rolled_back_to.append(len(committed))

    def report(self, stats: Stats) -> None:
        stats.lookahead_note = f"{len(self.outcomes)} rounds heard"


def test_a_drafter_the_engine_never_saw_drafts_through_the_interface_losslessly():
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 2.0, (6, 6))
    plain = SpeculativeEngine(MarkovBackend(logits, n_ctx=256)).generate(
        [1, 2], SamplingConfig(), SpecConfig(enabled=False), max_tokens=40).run()
    drafter = _OracleDrafter(logits)
    target = MarkovBackend(logits, n_ctx=256)  # it verifies trees of up to 8 lines
    generation = SpeculativeEngine(target, drafter).generate([1, 2], SamplingConfig(), SpecConfig(draft_max=4),
                                                             max_tokens=40)
    events = generation.run()
    assert [e.id for e in events] == [e.id for e in plain]
    stats = generation.stats
    assert stats.accepted > 0 and stats.rejections > 0  # the guesses were judged, some kept, some not
    assert len(drafter.outcomes) == stats.rounds == len(drafter.rolled_back_to)
    assert sum(o.accepted for o in drafter.outcomes) == stats.accepted
    assert all(o.written == o.accepted + 1 for o in drafter.outcomes)
    # Every round proposed but a last one with no room to draft (a plain step).
    assert sum(o.proposed for o in drafter.outcomes) >= stats.rounds - 1
    carried = [o for o in drafter.outcomes if o.carried]
    assert carried and drafter.rides == len(carried)  # the rider rode, and heard of each ride
    assert stats.lookahead_note == f"{stats.rounds} rounds heard"
    # What it was told it kept is what was committed: the prompt and every written token.
    assert drafter.rolled_back_to[-1] == 2 + sum(o.written for o in drafter.outcomes)


def test_a_reply_without_speculation_asks_its_drafter_nothing():
    logits = np.random.default_rng(4).normal(0, 2.0, (6, 6))
    drafter = _OracleDrafter(logits)
    SpeculativeEngine(MarkovBackend(logits), drafter).generate([1], SamplingConfig(), SpecConfig(enabled=False),
                                                               max_tokens=10).run()
    assert drafter.outcomes == [] and drafter.rolled_back_to == [] and drafter._asked == 0


def test_the_engine_module_names_no_drafter_class():
    """The engine builds no drafter of its own kind but the copier it copies with."""
    names = {node.id for node in ast.walk(ast.parse(inspect.getsource(speculative))) if isinstance(node, ast.Name)}
    assert not names & {"TextBridge", "LookaheadDrafter", "ModelDrafter", "DrafterKind"}
