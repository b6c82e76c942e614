"""The plan space of an instance (docs/model.md section 5): stage lengths, part counts, cut families.

``cut_vectors(instance, n, k)`` lists the interior cut points a stage with ``n`` rows (or
channels) may use with ``k`` parts; ``out_of_space(plan, instance)`` says why a valid plan lies
outside the space (empty list when inside). The family ``any`` holds every integer cut (every
row or channel boundary); it contains every other family. Device speeds for the ``capacity`` family are
exact rationals, so the rounding is the same everywhere.

The enumeration is capped (``MAX_CUT_VECTORS`` per stage extent and part count: a larger
family is no space a planner can search, and says so in one line) and stops at a deadline.
"""

from __future__ import annotations

from fractions import Fraction
from itertools import combinations
from math import comb, lcm, perm

from cachetools import LRUCache

from milp_planner.deadline import NEVER, Deadline
from milp_planner.errors import PlannerError
from milp_planner.instance.devices import layer_time
from milp_planner.space.geometry import round_half_up, tensor_grid
from milp_planner.instance import Instance
from milp_planner.space.plan import Plan

Cuts = tuple[int, ...]  # interior cut points, strictly increasing, within (0, n)


def whole_model_time(instance: Instance, d: int, exact: bool = True):
    """Seconds device ``d`` takes for the whole model alone (every layer whole)."""
    g = instance.graph
    dev = instance.devices[d]
    one = Fraction(1) if exact else 1.0
    total = one * 0
    for layer in g.layers:
        io, wb = layer_io_bytes(instance, layer.id)
        total += layer_time(dev.compute, layer, one, io, wb)
    return total


def layer_io_bytes(instance: Instance, lid: int) -> tuple[int, int]:
    """(input + output activation bytes, weight bytes) of a whole layer, for roofline models."""
    g = instance.graph
    layer = g.layers[lid]
    io = sum(g.elements(t) for t in layer.inputs) + g.elements(layer.output)
    return io * instance.dtype_bytes, layer.params * instance.dtype_bytes


def speeds(instance: Instance) -> tuple[Fraction, ...]:
    """Capacity speed of every device: 1 / (its time for the whole model alone)."""
    key = (instance.devices, instance.graph, instance.dtype_bytes)
    cached = getattr(instance, "_speeds", None)
    if cached is not None and cached[0][0] is key[0] and cached[0][1] is key[1] and cached[0][2] == key[2]:
        return cached[1]
    out = []
    for d in range(len(instance.devices)):
        t = whole_model_time(instance, d)
        out.append(Fraction(1) / t if t > 0 else Fraction(10**18))
    instance._speeds = (key, tuple(out))
    return instance._speeds[1]


def equal_cuts(n: int, k: int) -> Cuts:
    return tuple(round_half_up(i * n, k) for i in range(1, k))


def capacity_cuts(n: int, ordered_speeds) -> Cuts:
    """The cuts of ``n`` rows in proportion to the speeds (exact rationals, or the integers of
    ``integer_speeds``): each at ``round_half_up(n * (speeds so far) / total)``.

    >>> capacity_cuts(10, [Fraction(1, 3), Fraction(2, 3)]), capacity_cuts(10, [1, 2])
    ((3,), (3,))
    """
    total = sum(ordered_speeds)
    acc = 0
    cuts = []
    for s in ordered_speeds[:-1]:
        acc += s
        cuts.append(round_half_up(n * acc, total))  # exact: floor division of rationals or ints
    return tuple(cuts)


def integer_speeds(spd) -> tuple[int, ...]:
    """The speeds (exact rationals) times the least common multiple of their denominators:
    the same ratios as integers, which give the same capacity cuts some 20 times faster than
    ``Fraction`` arithmetic (43,680 orders of 4 of 16 devices: 3 s in fractions)."""
    scale = lcm(*(Fraction(v).denominator for v in spd)) if spd else 1
    return tuple(int(Fraction(v) * scale) for v in spd)


def _valid(cuts: Cuts, n: int) -> bool:
    pts = (0, *cuts, n)
    return all(pts[i] < pts[i + 1] for i in range(len(pts) - 1))


MAX_CUT_VECTORS = 200_000  # cut vectors of one family for one (extent, part count)
_CHECK_EVERY = 4096  # enumeration steps between two deadline checks
#: cut vectors kept between calls by each cache (about 100 bytes each, so some 200 MB): the
#: lists by stage extent and part count, and the families' sets; the least recently used go
#: first. Counted by entries (4,096 of up to ``MAX_CUT_VECTORS`` each), the caches could grow to
#: tens of GB in a process that solves many instances.
MAX_CACHED_VECTORS = 2_000_000


def _vector_cache() -> LRUCache:
    """An LRU cache that counts each entry by its vectors (an empty list as one)."""
    return LRUCache(MAX_CACHED_VECTORS, getsizeof=lambda v: max(1, len(v)))


_CACHE = _vector_cache()  # (splits, speeds, n, k, max_parts) -> the cut vectors
_FAMILIES = _vector_cache()  # (family, speeds, n, k, max_parts) -> their set


def _kept(cache, key, value):
    """``value``, stored under ``key`` when it fits the cache at all."""
    if len(value) < MAX_CACHED_VECTORS:
        cache[key] = value
    return value


def cut_vectors(instance: Instance, n: int, k: int, deadline: Deadline = NEVER) -> list[Cuts]:
    """Every cut vector for ``k`` parts of ``n`` rows allowed by the instance's split families.

    Raises ``PlannerError`` when a family alone has more than ``MAX_CUT_VECTORS`` of them and
    ``TimeoutError`` past ``deadline``."""
    key = (instance.search.splits, speeds(instance), n, k, instance.search.max_parts)
    hit = _CACHE.get(key)
    if hit is None:
        hit = _kept(_CACHE, key, _cut_vectors(*key, deadline=deadline, where=instance.name))
    return list(hit)


def _too_many(where: str, family: str, count: int, n: int, k: int, fix: str) -> PlannerError:
    return PlannerError(f"{where}: search.splits {family} gives {count:.3g} cut vectors for {k} parts of {n} "
                        f"rows or channels (more than {MAX_CUT_VECTORS}); {fix}")


def grid_points(n: int, g: int) -> range | list[int]:
    """The interior points of ``grid:g`` on ``n`` rows: ``round_half_up(j * n / g)``, 0 < j < g.
    When ``g >= n`` the points are at most one row apart, so every interior row is one."""
    if g >= n:
        return range(1, n)
    return sorted({round_half_up(j * n, g) for j in range(1, g)} - {0, n})



def snap_to_points(points: list[int], target) -> Cuts | None:
    """Each target cut moved to a point of ``points`` (sorted), in order and strictly
    increasing: the nearest point above the previous one that leaves room for the cuts still
    to place; None if there are fewer points than cuts."""
    out: list[int] = []
    lo = 0  # index of the first usable point
    for i, t in enumerate(target):
        hi = len(points) - (len(target) - i)  # leave a point for every later cut
        if lo > hi:
            return None
        j = min(range(lo, hi + 1), key=lambda x: abs(points[x] - t))
        out.append(points[j])
        lo = j + 1
    return tuple(out)

def speed_orders(spd, k: int):
    """Every distinct sequence of the speeds of ``k`` different devices: devices of equal
    speed give the same capacity cuts, so only the sequences of values count."""
    values = sorted(set(spd))
    left = {v: sum(1 for s in spd if s == v) for v in values}

    def rec(prefix):
        if len(prefix) == k:
            yield tuple(prefix)
            return
        for v in values:
            if left[v]:
                left[v] -= 1
                prefix.append(v)
                yield from rec(prefix)
                prefix.pop()
                left[v] += 1

    yield from rec([])


def _cut_vectors(splits, spd, n: int, k: int, max_parts: int, *, deadline: Deadline = NEVER,
                 where: str = "instance") -> tuple[Cuts, ...]:
    if k == 1:
        return ((),)
    if k > max_parts or k > n:
        return ()
    if "any" in splits:  # every other family is a subset of it
        splits = ("any",)
    found: dict[Cuts, None] = {}
    steps = 0

    def tick():
        nonlocal steps
        steps += 1
        if steps % _CHECK_EVERY == 0:
            deadline.check("the time limit ran out while enumerating the cut vectors")

    for family in splits:
        if family == "equal":
            found[equal_cuts(n, k)] = None
        elif family == "capacity":
            count = min(perm(len(spd), k), len(set(spd)) ** k)
            if count > MAX_CUT_VECTORS:
                raise _too_many(where, family, count, n, k, "lower search.max_parts or use equal or grid splits")
            for order in speed_orders(integer_speeds(spd), k):
                tick()
                found[capacity_cuts(n, order)] = None
        elif family == "any" or family.startswith("grid:"):
            points = range(1, n) if family == "any" else grid_points(n, int(family.split(":", 1)[1]))
            count = comb(len(points), k - 1)
            if count > MAX_CUT_VECTORS:
                fix = ("use grid:G with a smaller G, equal or capacity splits, or lower search.max_parts"
                       if family == "any" else "use a coarser grid or lower search.max_parts")
                raise _too_many(where, family, count, n, k, fix)
            for subset in combinations(points, k - 1):
                tick()
                found[tuple(subset)] = None
    return tuple(sorted(c for c in found if _valid(c, n)))


def cuts_in_space(instance: Instance, n: int, cuts: Cuts) -> bool:
    """Whether one split family of the instance gives ``cuts`` for ``len(cuts) + 1`` parts of
    ``n`` rows; ``any`` holds every valid vector, and a grid is checked point by point, both
    without listing vectors."""
    k = len(cuts) + 1
    if not _valid(cuts, n) or k > n:
        return False
    sp = instance.search
    for family in sp.splits:
        if family == "any":
            return True
        if family.startswith("grid:"):
            points = grid_points(n, int(family.split(":", 1)[1]))
            if all(c in points for c in cuts):
                return True
        elif cuts in family_vectors(family, speeds(instance), n, k, sp.max_parts, instance.name):
            return True
    return False


def family_vectors(family: str, spd, n: int, k: int, max_parts: int, where: str) -> frozenset:
    """The cut vectors of one (non-grid) family, cached: ``out_of_space`` asks for the same
    stage extents again and again (capacity cuts on 8 devices: ~0.2 s each uncached)."""
    key = (family, spd, n, k, max_parts)
    hit = _FAMILIES.get(key)
    if hit is None:
        hit = _kept(_FAMILIES, key, frozenset(_cut_vectors((family,), spd, n, k, max_parts, where=where)))
    return hit


def ranges_from_cuts(cuts: Cuts, n: int) -> list[tuple[int, int]]:
    pts = (0, *cuts, n)
    return [(pts[i], pts[i + 1]) for i in range(len(pts) - 1)]


def stage_extent(instance: Instance, last: int, axis: str) -> int:
    """How many rows (axis rows) or channels (axis channels) a stage ending at ``last`` cuts."""
    layer = instance.graph.layers[last]
    if axis == "channels":
        return tensor_grid(instance.graph, layer.output)[1]
    return layer.rows


def out_of_space(plan: Plan, instance: Instance) -> list[str]:
    """Reasons a structurally valid plan is outside the instance's search space."""
    sp = instance.search
    reasons = []
    for i, s in enumerate(plan.stages):
        where = f"stage {i} (layers {s.first}-{s.last})"
        n_layers = s.last - s.first + 1
        if n_layers > sp.fusion_limit:
            reasons.append(f"{where}: {n_layers} layers exceed fusion_limit {sp.fusion_limit}")
        k = len(s.parts)
        if k > sp.max_parts:
            reasons.append(f"{where}: {k} parts exceed max_parts {sp.max_parts}")
        if k == 1 or s.axis == "none":
            continue
        if s.axis not in sp.axes:
            reasons.append(f"{where}: axis {s.axis} is not in search.axes")
        n = stage_extent(instance, s.last, s.axis)
        ranges = sorted(p.range for p in s.parts)
        cuts = tuple(r[0] for r in ranges[1:])
        if k <= sp.max_parts and not cuts_in_space(instance, n, cuts):
            reasons.append(f"{where}: cuts {list(cuts)} of {n} are not from splits {list(sp.splits)}")
    return reasons


def nearest_cuts(instance: Instance, n: int, sizes: list[int]) -> Cuts | None:
    """The cut vector of the split families for ``len(sizes)`` parts of ``n`` closest (least
    total distance) to cutting ``n`` in the proportions ``sizes``; None if there is none."""
    k = len(sizes)
    if k > n:
        return None
    total = sum(sizes) or 1
    acc, target = 0, []
    for size in sizes[:-1]:
        acc += size
        target.append(acc * n / total)
    candidates: list[Cuts] = []
    sp = instance.search
    for family in sp.splits:
        if family.startswith("grid:"):
            snapped = snap_to_points(list(grid_points(n, int(family.split(":", 1)[1]))), target)
            if snapped is not None:
                candidates.append(snapped)
        else:
            try:
                candidates += family_vectors(family, speeds(instance), n, k, sp.max_parts, instance.name)
            except PlannerError:
                continue  # a family too large to list: the others may still fit
    if not candidates:
        return None
    return min(candidates, key=lambda c: sum(abs(a - b) for a, b in zip(c, target)))
