"""Print the corpus tally: ``python tests/fuzz_corpus/tally.py [--corpus inputs|commands] [-v] [--timeout S]``.

Runs every case of ``cases.py`` (``--corpus inputs``, issue #16: solve, evaluate, show and the
instance reader) or of ``commands.py`` (``--corpus commands``, issue #30: deploy, run, profile,
pareto, report, solve --out, zoo export, inspect) through the CLI and counts the outcomes.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

import os  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# MILP_FUZZ_REPO: run the corpus against another checkout (the BEFORE column of TALLY30.md)
sys.path.insert(0, os.environ.get("MILP_FUZZ_REPO") or str(Path(__file__).resolve().parents[2]))

from fuzz_corpus.runner import OUTCOMES, run_all  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per case")
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("-k", help="only cases whose name contains this")
    ap.add_argument("--corpus", choices=("inputs", "commands"), default="inputs",
                    help="inputs: issue #16's cases.py (default); commands: issue #30's commands.py")
    ap.add_argument("--no-slow", action="store_true", help="leave out the cases marked slow (time limits)")
    ap.add_argument("--fork", action="store_true",
                    help="run main() in forked children instead of fresh interpreters (faster)")
    args = ap.parse_args()
    if args.corpus == "commands":
        from fuzz_corpus.commands import CASES
    else:
        from fuzz_corpus.cases import CASES
    cases = [c for c in CASES if (not args.k or args.k in c.name) and not (args.no_slow and c.slow)]
    root = Path(tempfile.mkdtemp(prefix="fuzz-tally-"))
    try:
        results = run_all(cases, timeout=args.timeout, workers=args.workers, root=root, fork=args.fork)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    counts = Counter(r.outcome for r in results)
    if args.verbose:
        for c, r in zip(cases, results):
            flag = ""
            print(f"{r.outcome:18} {r.case}{flag} ({r.wall:.1f} s): {r.reason}", flush=True)
    print(f"{len(results)} cases: " + ", ".join(f"{counts[o]} {o}" for o in OUTCOMES if counts[o]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
