"""One deadline type: the moment work must stop, handed from a solve to each of its steps.

A time limit becomes one ``Deadline`` when the work starts (``Deadline.after(seconds)``);
every step below takes its share of the time left (``share``), caps its own time
(``within``), is granted a floor of time however late it starts (``at_least``), and asks
``passed()`` or ``left()``. No step does ``time.perf_counter()`` arithmetic by hand, and "no
limit" is ``NEVER`` (an infinite moment), not ``None`` checked at every use.

Solvers that take a time limit in seconds (HiGHS, OR-Tools) get ``seconds()``: None without
a limit, else the time left. A step that must stop raises ``DeadlinePassed`` (``check``).

>>> d = Deadline.after(10.0)
>>> 9.0 < d.left() <= 10.0 and not d.passed()
True
>>> d.share(0.5).left() <= 5.0 and d.within(1.0).left() <= 1.0
True
>>> Deadline.after(None) is NEVER, NEVER.passed(), NEVER.left(), NEVER.seconds()
(True, False, inf, None)
>>> NEVER.share(0.5) is NEVER and NEVER.within(2.0).left() <= 2.0
True
>>> Deadline.after(0.0).passed(), min(d, NEVER) == d
(True, True)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass


class DeadlinePassed(TimeoutError):
    """A step was still running when its deadline passed (a ``TimeoutError``, so the handlers
    of a step's time-out catch it)."""


@dataclass(frozen=True, order=True, slots=True)
class Deadline:
    """The ``time.perf_counter()`` value at which work must stop (``math.inf``: never).
    Ordered by that moment, so ``min`` of two deadlines is the earlier."""

    at: float = math.inf

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        """``seconds`` from now (at least 0); ``NEVER`` for None."""
        if seconds is None:
            return NEVER
        return cls(time.perf_counter() + max(0.0, float(seconds)))

    @property
    def never(self) -> bool:
        """Whether there is no limit."""
        return self.at == math.inf

    def left(self) -> float:
        """Seconds left (0 once passed; ``inf`` without a limit)."""
        return max(0.0, self.at - time.perf_counter())

    def seconds(self) -> float | None:
        """Seconds left for a solver's time-limit option: None without a limit."""
        return None if self.never else self.left()

    def passed(self) -> bool:
        return time.perf_counter() >= self.at

    def share(self, fraction: float) -> Deadline:
        """A deadline ``fraction`` of the time left from now (``NEVER`` stays ``NEVER``)."""
        if self.never:
            return self
        now = time.perf_counter()
        return Deadline(now + fraction * max(0.0, self.at - now))

    def within(self, seconds: float | None) -> Deadline:
        """This deadline or ``seconds`` from now, whichever comes first (None: this one)."""
        if seconds is None:
            return self
        return min(self, Deadline.after(seconds))

    def at_least(self, seconds: float) -> Deadline:
        """This deadline, or ``seconds`` from now if that is later: a step that must have a
        little time however late it starts (``NEVER`` stays ``NEVER``)."""
        if self.never:
            return self
        return max(self, Deadline.after(seconds))

    def shifted(self, seconds: float) -> Deadline:
        """This deadline moved by ``seconds`` (earlier when negative; ``NEVER`` stays ``NEVER``)."""
        return self if self.never else Deadline(self.at + seconds)

    def check(self, what: str = "") -> None:
        """Raise ``DeadlinePassed`` (naming ``what``) once the deadline has passed."""
        if self.passed():
            raise DeadlinePassed(what or "deadline passed")


#: no limit
NEVER = Deadline()
