"""Gaps of the seed benchmark's plans to a proven value over a space that contains them.

The certified optimum of an instance holds only for its search space; several baselines leave
it (other cuts, deeper fusion, more parts, the channel axis). ``attach_references`` gives every
row with a plan a reference that is proven for that plan, and its gap to it (never negative):

- a feasible plan inside the space: the best bound of the instance's exact runs (the certified
  optimum where there is one): ``in-space optimum`` / ``in-space bound``;
- any other plan: the largest of
  - the ``dp-any`` run on the instance's copy with every integer cut (splits ``any``, both
    axes, the same fusion_limit and max_parts), when the plan lies in that space and meets the
    caps: ``any-cut optimum`` where it certified, else ``any-cut bound``;
  - the floor of ``milp_planner.cost.floors`` over the smallest space with every cut that holds the
    plan (``milp_planner.report.baselines.enclosing_space``): ``floor``, valid for any cuts,
    fusion depth and caps.

Columns set on each row: ``ref_kind``, ``ref_value``, ``ref_gap`` = (value - ref) / value, and
``vs_in_space`` = (value - best in-space bound) / value, negative when a plan outside the space
beats the in-space optimum (reported as such, never as a gap).
"""

from __future__ import annotations

from pathlib import Path

from milp_planner.report.results import rel_gap as _gap

REF_COLUMNS = ("base_file", "ref_kind", "ref_value", "ref_gap", "vs_in_space")


def attach_references(rows: list[dict], root: Path, any_label: str = "dp-any") -> None:
    """Set the columns of ``REF_COLUMNS`` on every row (``base_file`` must be set already: the
    instance file a row's copy was made from). Rows need ``_plan`` (the plan as a dict)."""
    from milp_planner.instance import load_instance
    from milp_planner.report.baselines import Reference, enclosing_space, floor_reference
    from milp_planner.space.plan import Plan

    loaded: dict[str, object] = {}

    def inst_of(f):
        if f not in loaded:
            p = Path(f)
            loaded[f] = load_instance(p if p.is_absolute() else root / p)
        return loaded[f]

    any_refs: dict[tuple, Reference] = {}
    for r in rows:
        if r.get("variant") != any_label or r["value"] is None and r["bound"] is None:
            continue
        inst = inst_of(r["instance_file"])  # the copy: its space is the any-cut space
        if r["status"] == "optimal" and r["value"] is not None:
            ref = Reference(r["value"], "any-cut optimum", inst.search, "dp over splits any")
        elif r["bound"] is not None and r["bound"] > 0 and r["status"] != "error":
            ref = Reference(r["bound"], "any-cut bound", inst.search, f"dp over splits any ({r['status']})")
        else:
            continue
        any_refs[(r["base_file"], r["objective"])] = ref

    floors: dict[tuple, object] = {}
    for r in rows:
        for c in REF_COLUMNS[1:]:
            r[c] = None
        if r.get("variant") == any_label or r["value"] is None:
            continue
        r["vs_in_space"] = _gap(r["value"], r["best_bound"])
        feasible = bool(r["feasible"])
        if r["in_space"] and feasible:
            if r["best_bound"] is not None:
                r["ref_kind"] = "in-space optimum" if r["certified"] else "in-space bound"
                r["ref_value"], r["ref_gap"] = r["best_bound"], r["gap"]
            continue
        if not r.get("_plan"):
            continue
        inst = inst_of(r["base_file"])
        plan = Plan.from_dict(r["_plan"])
        cands = []
        ar = any_refs.get((r["base_file"], r["objective"]))
        if ar is not None and ar.covers(plan, inst, feasible):
            cands.append(ar)
        space = enclosing_space(inst.search, plan, len(inst.devices))
        key = (r["base_file"], r["objective"], space)
        if key not in floors:
            floors[key] = floor_reference(inst, r["objective"], space)
        cands += [ref for ref in floors[key] if ref.covers(plan, inst, feasible)]
        if not cands:
            continue
        best = max(cands, key=lambda c: c.value)
        gap = _gap(r["value"], best.value)
        if gap < 0:
            raise AssertionError(f"{r['instance']} / {r.get('variant')}: value {r['value']!r} below the "
                                 f"{best.kind} {best.value!r} of a space that holds its plan")
        r["ref_kind"], r["ref_value"], r["ref_gap"] = best.kind, best.value, gap


def in_space_references(rows: list[dict]) -> None:
    """The reference columns of rows recorded before they existed (a seeds.json without them,
    and without plans): in-space feasible rows get the best in-space bound; the others none."""
    for r in rows:
        if "ref_kind" in r:
            continue
        for c in REF_COLUMNS[1:]:
            r[c] = None
        if r["value"] is None:
            continue
        r["vs_in_space"] = _gap(r["value"], r["best_bound"])
        if r["in_space"] and r["feasible"] and r["best_bound"] is not None:
            r["ref_kind"] = "in-space optimum" if r["certified"] else "in-space bound"
            r["ref_value"], r["ref_gap"] = r["best_bound"], r["gap"]
