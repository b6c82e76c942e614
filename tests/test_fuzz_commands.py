"""Issue #30's hostile corpus (``tests/fuzz_corpus/commands.py``) through the command line:
``main()`` in a forked child, or a fresh interpreter for the cases that set an environment, a
memory limit or a signal.

Every case must end as a clean error (one line, exit 2; 130 or 143 after the signal it was
sent) or a correct run, with nothing written outside the output it names, no input damaged, no
output half-written, no process left running and no run past its time limit. The cases marked
slow (every planner against ``--time-limit`` on DenseNet-121 over 8 devices, the largest cost
tables) run with ``-m slow``. ``python tests/fuzz_corpus/tally.py --corpus commands -v`` prints
the same outcomes as a table.
"""

from __future__ import annotations

import pytest

from fuzz_corpus.commands import CASES
from fuzz_corpus.runner import GOOD, run_case


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=[pytest.mark.slow] if c.slow else [])
                                  for c in CASES])
def test_command_case(case, tmp_path):
    res = run_case(case, timeout=60.0, root=tmp_path, fork=True)
    assert res.outcome in GOOD, f"{case.name}: {res.outcome}: {res.reason}\n{res.stderr[-2000:]}"
