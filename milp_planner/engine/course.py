"""Where the rounds of an exact solve go next (``milp_planner.engine.rounds``): a small state machine.

Each round enumerates the plans within a bound ``upper``. ``Course`` holds which kind of round
comes next (its ``Mode``), that bound, the arcs the round may enumerate and its share of the
time left, and moves them on each outcome of a round: ``built`` (the graph was enumerated),
then ``advance`` (what its solve found), or ``timed_out`` / ``too_large`` (the enumeration
stopped). It holds no graph and runs no search, so every transition is tested as a plain
function of what a round reported (``tests/test_course.py``); the rounds' loop does the work.

The modes:

- ``KNOWN``: latency or energy with a bound proven elsewhere above the relaxation's (a Pareto
  front's ε-step): the first round starts there, with the round budget of arcs; if that
  overflows, the rounds crawl up from the relaxation's bound as without it.
- ``FIRST``: period or memory with a plan known: a small first round just above the
  relaxation's bound (which can be tight), with the round budget and a quarter of the time;
  past either, straight to the plan known (``JUMP``).
- ``JUMP``: period or memory: the label search, not the enumeration, limits a round, so it goes
  to the best plan known with no arc budget, within a quarter of the time left; when that graph
  cannot be built, the rounds crawl (which often find a better plan than the one known, and
  then need far fewer arcs than a graph holding every plan up to it).
- ``CRAWL``: the bound grows in small steps (the number of plans within a bound grows very fast
  near the optimum), never past the best plan found; a round that overflows its cap is retried
  halfway back.

>>> c = Course.start(minmax=False, bounded=True, lower=1.0, crawl_from=1.0, cap_at=math.inf,
...                  settings=RoundSettings())
>>> c.mode, c.upper
(<Mode.CRAWL: 'crawl'>, 1.0025)
>>> c.plan().max_arcs                   # a first crawl round: FIRST_CAP arcs at most
4000
>>> c.built(); c.advance(arcs=300, outside=1.003, best=None, lower=1.0) is Step.AGAIN
True
>>> round(c.upper, 6)                   # 1.0025 x (1 + 0.004): the step doubled, the graph grew slowly
1.00651
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

from milp_planner.deadline import Deadline

FIRST_CAP = 4000  # arcs a round may enumerate after a round of fewer than FIRST_CAP / 16
AIM_GROWTH = 4  # the next round aims at this many times the last round's arcs
MAX_EXP = 700.0  # math.exp overflows past about 709.78: a step beyond this aims at no finite bound
TINY_STEP = 1e-4  # relative: a round this close to the last that overflows is retried larger
MIN_GROWTH = 1e-4  # relative: the smallest step of the bound
SAME_BOUND = 1e-7  # relative: a bound this close to the last round's is not a step back
HELD = 1e-12  # relative: a plan this close to the last round's bound was within it
TINY_GRAPH = 200  # min-max: below this many arcs, the bound doubles until a plan is met
FIRST_SHARE = 0.25  # the FIRST round's most share of the time left
#: a JUMP round's (after the first round) most share of the time left; the crawl gets the rest
#: (exact-measurements.md, "the jump's share of the time": 0.25 against 0.75 on 21 rows)
JUMP_SHARE = 0.25


@dataclass(frozen=True)
class RoundSettings:
    """How the rounds enumerate: ``bounded`` (rounds by upper bound; else one round over the
    whole space), ``max_arcs`` (largest graph), ``max_options`` (largest stage for the layout
    bounds), ``delta`` (first bound above the relaxation's, relative), ``round_budget`` (arcs
    one round may enumerate) and ``growth`` (first relative step of the bound)."""

    bounded: bool = True
    max_arcs: int = 3_000_000
    max_options: int = 250_000
    delta: float = 0.0025
    round_budget: int = 60_000
    growth: float = 0.002
    symmetry: bool = True  # plans equal up to exchanging interchangeable devices are one plan
    relaxation: str = "auto"  # full | coarse | auto (the full one within half the time left, else coarse)
    #: seconds spent before the rounds on their behalf (the sub-fleet ladder): under ``auto`` the
    #: full relaxation gets half of the time left plus this (the half it had without them)
    relaxation_credit: float = 0.0
    #: a lower bound of the objective proven elsewhere (a Pareto front's ε-step under looser
    #: caps: ``formulations.pareto``); the rounds start there instead of crawling up to it
    known_lower: float = 0.0


class Mode(Enum):
    """Which kind of round comes next (see the module)."""

    KNOWN = "known"
    FIRST = "first"
    JUMP = "jump"
    CRAWL = "crawl"


class Step(Enum):
    """What the rounds do after an outcome."""

    AGAIN = "again"  # another round, within ``Course.upper``
    TIMED_OUT = "timed out"  # stop: the time ran out
    TOO_LARGE = "too large"  # stop: the graph within the bound cannot be enumerated
    EXHAUSTED = "exhausted"  # stop: every bound left would overflow again (min-max)
    DONE = "done"  # stop: the last round held the best plan found; nothing more to gain


@dataclass(frozen=True)
class RoundPlan:
    """The next round: its bound, the arcs it may enumerate, its share of the time left."""

    upper: float
    max_arcs: int
    share: float = 1.0

    def deadline(self, deadline: Deadline) -> Deadline:
        """The round's own stop moment within ``deadline``."""
        return deadline.share(self.share)


@dataclass
class Course:
    """The rounds' state between rounds (see the module); ``start`` makes the first."""

    minmax: bool  # period or memory: weak additive floors, the plan known sets the bound
    bounded: bool
    settings: RoundSettings
    cap_at: float  # no plan worse than this (the incumbent, loosened) is needed
    crawl_from: float  # where the crawl starts when a KNOWN round overflows
    upper: float
    mode: Mode
    growth: float
    done_upper: float  # the bound of the last round that finished
    prev_arcs: int = 0
    retry_cap: int = 0  # a larger cap for a round retried at the same bound
    rounds: int = 0
    #: (bound, arcs enumerated) of the rounds that found arcs
    grown: list[tuple[float, int]] = field(default_factory=list)
    #: min-max: (bound, arc cap) of the rounds that overflowed their cap or their time; the plans
    #: within a bound only grow with it, so no later round of at most that cap tries a bound at
    #: or above it (it bisects between the last round that finished and the overflow)
    overflowed: list[tuple[float, float]] = field(default_factory=list)

    @classmethod
    def start(cls, minmax: bool, bounded: bool, lower: float | None, crawl_from: float | None,
              cap_at: float, settings: RoundSettings) -> Course:
        """The first round: just above the proven bound ``lower`` (from ``crawl_from``, the
        relaxation's, when ``lower`` is higher and the objective additive), within ``cap_at``.
        Unbounded: one round over the whole space."""
        if not bounded:
            return cls(minmax, False, settings, cap_at, math.inf, math.inf,
                       Mode.JUMP if minmax else Mode.CRAWL, settings.growth, math.nan)
        upper = min(lower * (1 + settings.delta), cap_at)
        if minmax:
            small_first = math.isfinite(cap_at) and math.isfinite(lower) and cap_at > upper
            mode = Mode.FIRST if small_first else Mode.JUMP
        else:
            mode = Mode.KNOWN if lower > crawl_from else Mode.CRAWL
        if math.isinf(lower):
            # the relaxation (drop_overflow) proves that every plan has a stage part that fits no
            # device's memory cap: a round within 0 enumerates nothing and shows the caps infeasible
            upper = 0.0
        return cls(minmax, True, settings, cap_at, crawl_from, upper, mode, settings.growth, lower)

    def crawl_cap(self) -> int:
        """The arcs a crawl round may enumerate: the round budget, or four times the last round."""
        s = self.settings
        return s.max_arcs if not math.isfinite(self.upper) else min(s.max_arcs, max(s.round_budget, 4 * self.prev_arcs))

    def plan(self) -> RoundPlan | None:
        """The next round (None: ``Step.EXHAUSTED``, every bound left would overflow again).
        A crawl round may grow the graph 16-fold (at least to ``FIRST_CAP`` arcs) up to the
        round budget: near the optimum a small step can multiply the plans a hundredfold, and a
        round that overflows costs what it enumerated before it gave up."""
        s = self.settings
        self.rounds += 1
        if not self.bounded:  # one round over the whole space
            return RoundPlan(self.upper, s.max_arcs)
        if self.mode in (Mode.KNOWN, Mode.FIRST):
            return RoundPlan(self.upper, min(s.max_arcs, s.round_budget), FIRST_SHARE if self.mode is Mode.FIRST else 1.0)
        if self.mode is Mode.JUMP:
            return RoundPlan(self.upper, s.max_arcs, 1.0 if self.rounds == 1 else JUMP_SHARE)
        cap = self.crawl_cap()
        if not self.minmax:
            return RoundPlan(self.upper, min(cap, max(FIRST_CAP, 16 * self.prev_arcs, self.retry_cap)))
        below = below_overflow(self.upper, self.done_upper, cap, self.overflowed)
        if below is None:
            return None
        self.upper = below
        return RoundPlan(below, cap)

    def _crawl_back(self) -> Step:
        """Leave a JUMP: crawl up from the last bound that finished."""
        self.mode, self.upper = Mode.CRAWL, self.done_upper * (1 + self.growth)
        return Step.AGAIN

    def timed_out(self, deadline: Deadline) -> Step:
        """The round's enumeration ran out of its time (``deadline``: the whole solve's)."""
        if self.mode is Mode.FIRST and not deadline.passed():
            self.mode, self.upper = Mode.JUMP, self.cap_at  # it took its share: straight to the plan known
            return Step.AGAIN
        if self.mode in (Mode.FIRST, Mode.JUMP) and not deadline.never and not deadline.passed():
            self.overflowed.append((self.upper, math.inf))  # less time is left for any later round
            return self._crawl_back()
        return Step.TIMED_OUT

    def too_large(self, cap: int) -> Step:
        """The plans within the round's bound were more than its cap of arcs."""
        s = self.settings
        if self.mode is Mode.KNOWN:
            self.mode, self.upper = Mode.CRAWL, min(self.crawl_from * (1 + s.delta), self.cap_at)
            return Step.AGAIN
        if self.mode is Mode.FIRST:
            self.mode, self.upper = Mode.JUMP, self.cap_at  # over its budget: straight to the plan known
            return Step.AGAIN
        if self.minmax:
            self.overflowed.append((self.upper, cap))
        if self.mode is Mode.JUMP:
            return self._crawl_back()
        if math.isfinite(self.upper) and cap < self.crawl_cap() and self.upper <= self.done_upper * (1 + TINY_STEP):
            self.retry_cap = 4 * cap  # many plans tie within a tiny step (interchangeable devices): a larger round
            return Step.AGAIN
        if math.isfinite(self.upper) and cap < s.max_arcs and self.upper > self.done_upper * (1 + SAME_BOUND):
            # too many plans within this bound for one round: try halfway back
            self.upper = self.done_upper + (self.upper - self.done_upper) / 2
            self.growth = max(self.growth / 4, MIN_GROWTH)
            return Step.AGAIN
        return Step.TOO_LARGE

    def built(self) -> None:
        """The round's graph was enumerated."""
        self.done_upper, self.retry_cap = self.upper, 0
        if self.mode in (Mode.KNOWN, Mode.FIRST):
            self.mode = Mode.CRAWL if self.mode is Mode.KNOWN else Mode.JUMP

    def advance(self, arcs: int, outside: float, best: float | None, lower: float,
                incumbent: float | None = None) -> Step:
        """The next bound after a round that enumerated ``arcs`` arcs, left out no plan below
        ``outside`` and did not certify; ``best``: the best plan the rounds found, ``lower``
        the bound proven, ``incumbent`` the plan known before the rounds.

        Past every pruned partial plan's floor; the step doubles while the graphs grow slowly
        and halves when they grow fast. Min-max: while the graphs stay tiny the bound doubles
        until a plan is met; the round within that plan certifies (a round too large for the
        budget falls back halfway: a bisection between the bound and the plan)."""
        self.growth = self.growth * 2 if arcs <= 2 * self.prev_arcs + 1000 else max(self.growth / 2, MIN_GROWTH)
        if arcs:
            self.grown.append((self.done_upper, arcs))
        self.prev_arcs = arcs
        upper = max(outside, min(self.upper * (1 + self.growth), aim(self.grown)))
        if self.minmax:
            if best is not None:
                if best <= self.done_upper * (1 + HELD):
                    return Step.DONE
                upper = best
            elif self.mode is Mode.JUMP and incumbent is not None:
                upper = incumbent
            elif arcs < TINY_GRAPH:
                upper = max(upper, 2 * self.done_upper)
        elif best is not None:
            upper = min(upper, best)
        if upper > 2 * max(lower, 1e-12) and not self.minmax:
            upper = math.inf  # so far above the bound: one round over every plan left
        if self.bounded:
            upper = min(upper, self.cap_at)
        self.upper = upper
        return Step.AGAIN


def aim(grown: list[tuple[float, int]]) -> float:
    """The bound at which the next round should enumerate about ``AIM_GROWTH`` times the arcs of
    the last, from the growth between the last two rounds that found arcs (log-linear in the
    bound; inf without two such rounds). Near the optimum the count grows ever more slowly, so
    this errs on the small side."""
    if len(grown) < 2:
        return math.inf
    (u1, a1), (u2, a2) = grown[-2], grown[-1]
    if a2 <= a1 or u2 <= u1 or u1 <= 0:
        return math.inf
    rate = math.log(a2 / a1) / math.log(u2 / u1)
    if not rate > 0:  # bounds so far apart that their ratio overflows
        return math.inf
    step = math.log(max(AIM_GROWTH, FIRST_CAP / 2 / a2)) / rate
    return u2 * math.exp(step) if step < MAX_EXP else math.inf


def below_overflow(upper: float, done: float, cap: float, overflowed: list[tuple[float, float]]) -> float | None:
    """``upper``, or halfway from ``done`` (the bound of the last round that finished) to the
    least bound that overflowed a cap at least ``cap`` when ``upper`` is at or above it: the
    plans within a bound only grow with it, so such a round would overflow again (on
    ``coopai/vgg16-rpi4-6.yaml`` period the rounds went back to the incumbent after each round
    that finished and bisected down to the same bounds three times in one minute). None when
    that overflow is within ``TINY_STEP`` of ``done``: no round of this cap can prove more."""
    least = min((t for t, c in overflowed if c >= cap), default=math.inf)
    if upper < least or not least > done:
        return upper
    if least <= done * (1 + TINY_STEP):
        return None
    return done + (least - done) / 2
