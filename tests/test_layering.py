"""The layering is one-way: ``formulations`` (the exact models) never imports the layers built
on it (the exact engine, planners, reports, the command line, deployment), the engine
(``milp_planner.engine``) none above it, and ``import formulations`` is light
(its public names resolve on first use, so neither Pyomo nor OR-Tools is loaded by it).

The modules are read with ``ast``, not imported, so an import inside a function counts too."""

import ast
import doctest
import os
import subprocess
import sys
from pathlib import Path

import pytest

import formulations
import milp_planner.engine as engine

ROOT = Path(__file__).resolve().parents[1]
#: the packages above the exact engine
ABOVE_ENGINE = ("milp_planner.planners", "milp_planner.report", "milp_planner.cli", "milp_planner.deploy")
#: the packages above ``formulations``
UPPER = ("milp_planner.engine",) + ABOVE_ENGINE
#: what ``import formulations`` must not load
HEAVY = ("pyomo", "ortools")


def imported_names(tree: ast.AST) -> list[tuple[int, str]]:
    """Every module name ``tree`` imports, with its line: ``import a.b``, ``from a import b``
    (as ``a.b`` too, ``b`` may be a module) and ``importlib.import_module("a.b")``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return found


def reaches_up(name: str, above=UPPER) -> bool:
    return any(name == upper or name.startswith(upper + ".") for upper in above)


def offenders(folder: Path, above) -> dict[str, str]:
    """"path:line" -> the first name that line of a module under ``folder`` imports from ``above``."""
    modules = sorted(folder.rglob("*.py"))
    assert modules
    found: dict[str, str] = {}
    for path in modules:
        for line, name in imported_names(ast.parse(path.read_text(), str(path))):
            if reaches_up(name, above):
                found.setdefault(f"{path.relative_to(ROOT)}:{line}", name)
    return found


@pytest.mark.parametrize("folder,above", [("formulations", UPPER), ("milp_planner/engine", ABOVE_ENGINE)])
def test_a_layer_imports_nothing_above_it(folder, above):
    bad = offenders(ROOT / folder, above)
    assert not bad, f"{folder}/ imports a layer above it:\n" + "\n".join(f"{where}: {name}" for where, name in bad.items())


def test_the_scan_sees_every_form_of_import():
    tree = ast.parse("import milp_planner.report.cli\n"
                     "def f():\n    from milp_planner import planners\n"
                     "def g():\n    importlib.import_module('milp_planner.deploy')\n"
                     "from milp_planner.cost import evaluator\n")
    assert [line for line, name in imported_names(tree) if reaches_up(name)] == [1, 3, 5]


def test_import_formulations_loads_neither_pyomo_nor_ortools():
    code = ("import sys, formulations; "
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", f"import formulations loaded {out.stdout.strip()}"


@pytest.mark.parametrize("package,name", [(formulations, n) for n in formulations.__all__]
                         + [(engine, n) for n in engine.__all__])
def test_every_public_name_resolves(package, name):
    assert getattr(package, name) is not None
    assert name in dir(package)


def test_the_engine_examples_run():
    assert doctest.testmod(engine).failed == 0


def test_the_lazy_names_examples_run():
    import milp_planner.lazy

    assert doctest.testmod(milp_planner.lazy).failed == 0
