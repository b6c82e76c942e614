"""The mutation gate of the certificate path: mutate the code that decides status, bound, gap,
certificate, rounds, Pareto steps and stage geometry, one change at a time, and run the tests
that guard it. A mutant the tests do not kill is a hole: either a test is missing or the
mutant changes nothing a user can see (an equivalent mutant, said so in the results).

    python benchmarks/mutation.py --out benchmarks/results/mutation.md [--only certificate] [--limit N]

Each mutant is written into a copy of the tracked files (``git ls-files``) in a temporary
folder, so the working tree is never touched, and the tests run there (``python -m pytest -x``).
Operators: comparison flips (``<`` / ``<=``, ``>`` / ``>=``, ``==`` / ``!=``, ``is`` / ``is not``,
``in`` / ``not in``), ``and`` / ``or``, a dropped ``not``, ``+`` / ``-`` and ``*`` / ``/``,
``min`` / ``max``, and numeric constants moved (a tolerance x 10, an integer + 1). Code inside
f-strings and docstrings is left alone.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the test files that guard the certificate, fastest first (``-x`` stops at the first failure)
CERT_TESTS = ["tests/test_certificate.py", "tests/test_status.py", "tests/test_rounds_exits.py",
              "tests/test_crash_regressions.py", "tests/test_exact.py", "tests/test_differential.py::test_quick_cases",
              "tests/test_differential.py::test_the_bed_catches_a_wrong_certificate"]
PARETO_TESTS = ["tests/test_pareto.py", "tests/test_differential.py::test_quick_fronts",
                "tests/test_differential.py::test_the_bed_catches_a_missing_front_point"]
#: the operators that can change what is proven; the rounds' step sizes and budgets (their numeric
#: constants) only change how fast a certificate comes, so they are left out there
DECISIONS = frozenset({"compare", "boolop", "not", "minmax"})
EVERY = DECISIONS | {"binop", "constant"}
#: (group, file, qualified functions or None for the whole module, operators, the tests that guard them)
TARGETS = [
    ("certificate", "milp_planner/certificate.py", None, EVERY, CERT_TESTS),
    ("certificate", "formulations/certificate.py", ["GraphSolve.proven_in_graph", "disagreement"], EVERY,
     CERT_TESTS),
    ("certificate", "formulations/tolerance.py", ["loose"], EVERY, CERT_TESTS),
    ("certificate", "milp_planner/planners/base.py", ["PlanResult.gap", "PlanResult.settle", "Planner.solve",
                                                      "Planner.score"], EVERY, CERT_TESTS),
    ("certificate", "milp_planner/planners/exact.py",
     ["_rounds_source", "_proofs", "_replace_plan", "ExactPlanner.run_search", "ExactPlanner.score",
      "ExactPlanner._fallback", "ExactPlanner.more_proofs", "ExactPlanner._result", "ExactPlanner._start_result",
      "ExactPlanner._start_proven", "BruteForcePlanner.search"], EVERY,
     CERT_TESTS + ["tests/test_flow_floor.py", "tests/test_time_limits.py", "tests/test_anytime.py",
                   "tests/test_improve.py", "tests/test_polish.py"]),
    ("rounds", "milp_planner/engine/rounds.py", ["explore", "_rounds", "_answer_round", "graph_answer"], DECISIONS,
     CERT_TESTS),
    #: where the next round goes: every operator (its transitions are tested one by one)
    ("course", "milp_planner/engine/course.py", None, EVERY,
     ["tests/test_course.py", "tests/test_rounds.py", "tests/test_rounds_exits.py"]),
    ("caps", "milp_planner/cost/evaluator.py", ["within_cap", "cap_limit"], EVERY,
     CERT_TESTS + ["tests/test_caps.py", "tests/test_evaluator.py"]),
    ("pareto", "formulations/pareto.py", ["next_cap", "resolution"], EVERY, PARETO_TESTS),
    ("pareto", "milp_planner/pareto.py", ["pareto_front"], EVERY, PARETO_TESTS),
    #: the memory budget: when a search stops, and what budget a default run gets
    ("budget", "formulations/budget.py", ["memory_budget", "check_memory", "parse_size"], EVERY,
     ["tests/test_anytime.py"]),
    ("geometry", "milp_planner/space/geometry.py", ["StageGeometry._row_part", "StageGeometry._channel_part",
                                                    "round_half_up"], EVERY,
     ["tests/test_geometry_golden.py", "tests/test_evaluator.py"]),
    ("geometry", "milp_planner/model/graph.py", ["input_rows", "clip", "hull"], EVERY,
     ["tests/test_geometry_golden.py", "tests/test_evaluator.py"]),
]

SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
        ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
BINOPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}


def _targets_of(tree: ast.Module, names: list[str] | None) -> list[ast.AST]:
    """The function nodes named ``Class.method`` or ``function`` (every function when None)."""
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if names is None or node.name in names:
                out.append(node)
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                        names is None or f"{node.name}.{sub.name}" in names):
                    out.append(sub)
    return out


def _skip(node: ast.AST, parents: dict) -> bool:
    """Inside an f-string or a docstring: not code a user sees run."""
    p = parents.get(node)
    while p is not None:
        if isinstance(p, ast.JoinedStr):
            return True
        p = parents.get(p)
    return False


@dataclass
class Site:
    """One mutation: where, and what it does."""

    index: int
    line: int
    what: str


class Mutator(ast.NodeTransformer):
    """Applies mutation number ``pick`` (or, with ``pick=None``, only counts the sites)."""

    def __init__(self, scope: set[int], parents: dict, ops=EVERY, pick: int | None = None):
        self.scope, self.parents, self.ops, self.pick = scope, parents, ops, pick
        self.sites: list[Site] = []

    def _site(self, node, what: str, op: str) -> bool:
        if op not in self.ops or id(node) not in self.scope or _skip(node, self.parents):
            return False
        self.sites.append(Site(len(self.sites), getattr(node, "lineno", 0), what))
        return self.pick == len(self.sites) - 1

    def visit_Compare(self, node):
        self.generic_visit(node)
        for i, op in enumerate(node.ops):
            new = SWAP.get(type(op))
            if new and self._site(node, f"{type(op).__name__} -> {new.__name__}", "compare"):
                node.ops[i] = new()
        return node

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        new = ast.Or if isinstance(node.op, ast.And) else ast.And
        if self._site(node, f"{type(node.op).__name__} -> {new.__name__}", "boolop"):
            node.op = new()
        return node

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not) and self._site(node, "not dropped", "not"):
            return node.operand
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        new = BINOPS.get(type(node.op))
        if new and self._site(node, f"{type(node.op).__name__} -> {new.__name__}", "binop"):
            node.op = new()
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            new = "max" if node.func.id == "min" else "min"
            if self._site(node, f"{node.func.id} -> {new}", "minmax"):
                node.func = ast.Name(new, ast.Load())
        return node

    def visit_Constant(self, node):
        v = node.value
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return node
        new = v * 10 if isinstance(v, float) and 0 < abs(v) < 1 else v + 1
        if self._site(node, f"{v!r} -> {new!r}", "constant"):
            return ast.copy_location(ast.Constant(new), node)
        return node


def _scope(tree: ast.Module, names) -> tuple[set[int], dict]:
    parents: dict = {}
    for p in ast.walk(tree):
        for c in ast.iter_child_nodes(p):
            parents[c] = p
    scope = set()
    for fn in _targets_of(tree, names):
        body = fn.body
        if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # not the docstring
        for stmt in body:
            scope.update(id(n) for n in ast.walk(stmt))
    return scope, parents


def sites(path: Path, names, ops) -> list[Site]:
    tree = ast.parse(path.read_text())
    scope, parents = _scope(tree, names)
    m = Mutator(scope, parents, ops)
    m.visit(tree)
    return m.sites


def mutant_source(path: Path, names, ops, pick: int) -> str:
    tree = ast.parse(path.read_text())
    scope, parents = _scope(tree, names)
    Mutator(scope, parents, ops, pick).visit(tree)
    return ast.unparse(ast.fix_missing_locations(tree))


@dataclass
class Outcome:
    group: str
    file: str
    site: Site
    killed: bool
    how: str  # "failed", "timeout" or "survived"
    seconds: float


def copy_tree(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)


def run_tests(tree: Path, tests: list[str], timeout: float) -> tuple[bool, str]:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow", *tests]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return True, "timeout"
    return proc.returncode != 0, "failed" if proc.returncode != 0 else "survived"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write the Markdown results here")
    p.add_argument("--only", help="only this group (certificate, rounds, course, caps, pareto, budget, geometry)")
    p.add_argument("--limit", type=int, help="at most this many mutants (a smoke run)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds a mutant's tests may take")
    p.add_argument("--list", action="store_true", help="list the mutation sites and stop")
    p.add_argument("--rerun", metavar="LOG", nargs="+",
                   help="only the mutants these earlier logs say survived (file:line and operator)")
    args = p.parse_args(argv)
    plan = []
    wanted = _survivors(args.rerun) if args.rerun else None
    for group, file, names, ops, tests in TARGETS:
        if args.only and group != args.only:
            continue
        for s in sites(ROOT / file, names, ops):
            if wanted is None or (file, s.line, s.what) in wanted:
                plan.append((group, file, names, ops, tests, s))
    if args.list:
        for group, file, _, _, _, s in plan:
            print(f"{group} {file}:{s.line} {s.what}")
        print(f"{len(plan)} mutants")
        return 0
    if args.limit:
        plan = plan[:args.limit]
    outcomes: list[Outcome] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        copy_tree(tree)
        for k, (group, file, names, ops, tests, s) in enumerate(plan):
            original = (tree / file).read_text()
            (tree / file).write_text(mutant_source(ROOT / file, names, ops, s.index))
            t0 = time.perf_counter()
            killed, how = run_tests(tree, tests, args.timeout)
            (tree / file).write_text(original)
            outcomes.append(Outcome(group, file, s, killed, how, time.perf_counter() - t0))
            print(f"[{k + 1}/{len(plan)}] {file}:{s.line} {s.what}: {how} ({outcomes[-1].seconds:.0f} s)", flush=True)
    text = render(outcomes, time.perf_counter() - started, args)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


def _survivors(logs: list[str]) -> set[tuple[str, int, str]]:
    """(file, line, operator) of every mutant a log's progress lines say survived."""
    import re

    out = set()
    for log in logs:
        for line in Path(log).read_text().splitlines():
            m = re.match(r"\[\d+/\d+\] (\S+):(\d+) (.+): survived", line)
            if m:
                out.add((m.group(1), int(m.group(2)), m.group(3)))
    return out


def render(outcomes: list[Outcome], seconds: float, args) -> str:
    import platform

    survivors = [o for o in outcomes if not o.killed]
    load = os.getloadavg()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    lines = ["# Mutation gate of the certificate path", "",
             f"Command: `python benchmarks/mutation.py{' --only ' + args.only if args.only else ''}`  ",
             f"Commit {commit}, {platform.machine()}, {os.cpu_count()} cores, load average {load[0]:.2f}, "
             f"{seconds / 60:.0f} min.", "",
             "| group | file | mutants | killed | survived |", "|---|---|---|---|---|"]
    keys = sorted({(o.group, o.file) for o in outcomes})
    for g, f in keys:
        mine = [o for o in outcomes if (o.group, o.file) == (g, f)]
        lines.append(f"| {g} | `{f}` | {len(mine)} | {sum(o.killed for o in mine)} | "
                     f"{sum(not o.killed for o in mine)} |")
    lines.append(f"| all | | {len(outcomes)} | {len(outcomes) - len(survivors)} | {len(survivors)} |")
    lines += ["", "Survivors (each with why it changes no reported output, or the test added for it):", ""]
    lines += [f"- `{o.file}:{o.site.line}` {o.site.what}" for o in survivors] or ["- none"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
