"""Issue #16's hostile inputs (``tests/fuzz_corpus/cases.py``) through the CLI: ``main()`` in a forked child
(or a fresh interpreter for the cases that set an environment).

Every case must end as a clean error (exit 2, one line, no traceback) or a correct run; no
hang past 30 s, no input changed, no temporary file left.
``python tests/fuzz_corpus/tally.py -v`` prints the same outcomes as a table.
"""

from __future__ import annotations

import pytest

from fuzz_corpus.cases import CASES
from fuzz_corpus.runner import GOOD, run_case


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
def test_corpus_case(case, tmp_path):
    res = run_case(case, timeout=30.0, root=tmp_path, fork=True)
    assert res.outcome in GOOD, f"{case.name}: {res.outcome}: {res.reason}\n{res.stderr[-2000:]}"
