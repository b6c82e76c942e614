"""Stage geometry: what each part of a stage computes, reads and owns (docs/model.md section 3).

Everything here is device-free: it depends only on the layer graph, the stage's layers,
its axis and its part ranges. The evaluator prices it; the exact formulations enumerate it.

A *region* of a tensor is a box ``rows x channels`` of its (H, C) grid; one cell of the grid
holds ``unit(tensor)`` elements (N x W for an NCHW tensor). Tensors without a height have one
row; tensors of rank other than 4 use their last dimension as channels.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from math import prod

from milp_planner.model.graph import EMPTY, Interval, LayerGraph, hull, input_rows, overlap


@dataclass(frozen=True)
class Region:
    rows: Interval
    chans: Interval
    #: rows x channels; computed once here, since the stage pricing asks for it millions of times
    cells: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        r, c = self.rows, self.chans
        object.__setattr__(self, "cells", max(0, r[1] - r[0]) * max(0, c[1] - c[0]))

    @property
    def empty(self) -> bool:
        return self.cells == 0


NOTHING = Region(EMPTY, EMPTY)


def intersect_cells(a: Region, b: Region) -> int:
    # ``overlap(a.rows, b.rows) * overlap(a.chans, b.chans)``, written out: the stage pricing
    # calls it for every owner of every tensor a part reads (millions of times per stage graph)
    ar, br = a.rows, b.rows
    rows = (ar[1] if ar[1] < br[1] else br[1]) - (ar[0] if ar[0] > br[0] else br[0])
    if rows <= 0:
        return 0
    ac, bc = a.chans, b.chans
    chans = (ac[1] if ac[1] < bc[1] else bc[1]) - (ac[0] if ac[0] > bc[0] else bc[0])
    return rows * chans if chans > 0 else 0


def union_cells(a: Region, b: Region) -> int:
    return a.cells + b.cells - intersect_cells(a, b)


def tensor_grid(graph: LayerGraph, tensor: str) -> tuple[int, int, int]:
    """(H, C, unit): rows, channels and elements per cell of ``tensor``."""
    shape = graph.shape(tensor)
    if len(shape) == 4:
        n, c, h, w = shape
        return h, c, n * w
    if not shape:
        return 1, 1, 1
    c = shape[-1]
    return 1, c, prod(shape[:-1])


def full_region(graph: LayerGraph, tensor: str) -> Region:
    h, c, _ = tensor_grid(graph, tensor)
    return Region((0, h), (0, c))


@lru_cache(maxsize=65536)
def _fraction(p: int, q: int) -> Fraction:
    """Fraction(p, q), remembered (the geometry builds the same shares thousands of times)."""
    return Fraction(p, q)


def round_half_up(p: int, q: int) -> int:
    """round(p / q) half up on the exact rational: floor((2p + q) / 2q) (docs/model.md section 3)."""
    return (2 * p + q) // (2 * q)


@dataclass
class PartGeometry:
    """One part of a stage: the regions it computes, reads from outside and owns afterwards."""

    computed: dict[int, Region] = field(default_factory=dict)  # layer id -> output region
    fraction: dict[int, Fraction] = field(default_factory=dict)  # layer id -> share computed
    needs: dict[str, Region] = field(default_factory=dict)  # external tensor -> region read
    owns: dict[str, Region] = field(default_factory=dict)  # exit tensor -> region owned
    axis: str = "rows"  # "channels" for a channel part (a table cost model may price it apart)


class StageGeometry:
    """Cached geometry of stages of one graph.

    >>> geo = StageGeometry(graph)                                   # doctest: +SKIP
    >>> parts = geo.parts(0, 3, "rows", ((0, 56), (56, 112)))         # doctest: +SKIP
    """

    def __init__(self, graph: LayerGraph):
        # held weakly: the shared geometries (``stage_geometry``) must not keep a graph alive
        # once its instance is gone (their caches hold up to 200,000 parts); its pricers hold it
        self._graph = weakref.ref(graph)
        self._cache: dict = {}
        self._part_cache: dict = {}  # (first, last, axis, range) -> PartGeometry
        self._exits: dict = {}
        self._inputs: dict = {}

    @property
    def graph(self) -> LayerGraph:
        """The graph (whoever made this geometry holds it while using it)."""
        graph = self._graph()
        if graph is None:
            raise ReferenceError("the graph of this StageGeometry was garbage-collected")
        return graph

    # -- tensors crossing the stage boundary ---------------------------------------------
    def exit_tensors(self, first: int, last: int) -> list[str]:
        """Outputs of layers first..last read after the stage or that are graph outputs."""
        key = (first, last)
        if key not in self._exits:
            g = self.graph
            outs = set(g.outputs)
            self._exits[key] = [
                g.layers[i].output
                for i in range(first, last + 1)
                if g.layers[i].output in outs or any(c > last for c in g.consumers(g.layers[i].output))
            ]
        return self._exits[key]

    def input_tensors(self, first: int, last: int) -> list[str]:
        """Tensors read by layers first..last and produced before them (or graph inputs)."""
        key = (first, last)
        if key not in self._inputs:
            g = self.graph
            seen: dict[str, None] = {}
            for i in range(first, last + 1):
                for t in g.layers[i].inputs:
                    p = g.producer(t)
                    if p is None or p < first:
                        seen[t] = None
            self._inputs[key] = list(seen)
        return self._inputs[key]

    # -- parts ------------------------------------------------------------------------------
    def parts(self, first: int, last: int, axis: str, ranges) -> list[PartGeometry]:
        """Geometry of every part; ``ranges`` holds one (start, stop) per part (None = all).

        Each part is remembered by its own range (the layouts of a stage share many part
        ranges), so the same range gives the same ``PartGeometry`` object."""
        key = (first, last, axis, tuple(ranges))
        hit = self._cache.get(key)
        if hit is None:
            if len(self._cache) > 200_000:
                self._cache.clear()
                self._part_cache.clear()
            hit = [self._part(first, last, axis, r) for r in ranges]
            self._cache[key] = hit
        return hit

    def _part(self, first: int, last: int, axis: str, rng) -> PartGeometry:
        key = (first, last, axis, rng)
        part = self._part_cache.get(key)
        if part is None:
            if axis == "channels":
                part = self._channel_part(first, rng)
            else:
                part = self._row_part(first, last, axis, rng)
            self._part_cache[key] = part
        return part

    def _row_part(self, first: int, last: int, axis: str, rng) -> PartGeometry:
        g = self.graph
        layers = g.layers
        last_rows = layers[last].rows
        if axis == "none" or rng is None:
            rng = (0, last_rows)
        a, b = rng
        part = PartGeometry()
        exits = self._exit_set(first, last)
        req: dict[int, Interval] = {}
        for lid in range(last, first - 1, -1):
            layer = layers[lid]
            h_out = layer.rows
            iv = EMPTY
            if layer.output in exits:
                if lid == last:
                    own = (a, b)
                else:  # other exit tensors are cut at the same fractions
                    own = (round_half_up(a * h_out, last_rows), round_half_up(b * h_out, last_rows))
                if own[0] >= own[1]:
                    own = EMPTY
                part.owns[layer.output] = Region(own, (0, layer.channels))
                iv = own
            for c in g.consumers(layer.output):
                if first <= c <= last:
                    rc = req.get(c)
                    if rc is not None and rc[0] < rc[1]:
                        iv = hull(iv, input_rows(layers[c].rowdep, rc, h_out))
            if iv[0] < iv[1]:
                if not layer.row_splittable:
                    iv = (0, h_out)
                part.computed[lid] = Region(iv, (0, layer.channels))
                part.fraction[lid] = _fraction(iv[1] - iv[0], h_out)
            req[lid] = iv
        for lid in range(first, last + 1):
            iv = req[lid]
            if iv[0] >= iv[1]:
                continue
            layer = layers[lid]
            for t in layer.inputs:
                p = g.producer(t)
                if p is not None and p >= first:
                    continue
                h_in, c_in, _ = tensor_grid(g, t)
                rows = input_rows(layer.rowdep, iv, h_in) if layer.row_splittable else (0, h_in)
                prev = part.needs.get(t)
                rows = hull(prev.rows, rows) if prev else rows
                part.needs[t] = Region(rows, (0, c_in)) if rows[0] < rows[1] else NOTHING
        return part

    def _exit_set(self, first: int, last: int) -> frozenset[str]:
        key = (first, last, "set")
        hit = self._exits.get(key)
        if hit is None:
            hit = self._exits[key] = frozenset(self.exit_tensors(first, last))
        return hit

    def _channel_part(self, lid: int, rng) -> PartGeometry:
        g = self.graph
        layer = g.layers[lid]
        c_out = layer.channels
        c0, c1 = rng if rng is not None else (0, c_out)
        part = PartGeometry(axis="channels")
        if c0 >= c1:
            if layer.output in self.exit_tensors(lid, lid):
                part.owns[layer.output] = NOTHING
            return part
        out = Region((0, layer.rows), (c0, c1))
        part.computed[lid] = out
        part.fraction[lid] = Fraction(c1 - c0, c_out)
        if layer.output in self.exit_tensors(lid, lid):
            part.owns[layer.output] = out
        for t in layer.inputs:
            h_in, c_in, _ = tensor_grid(g, t)
            chans = (0, c_in)
            if layer.groups > 1 and c_in % layer.groups == 0 and c_out % layer.groups == 0:
                per_out, per_in = c_out // layer.groups, c_in // layer.groups
                g0, g1 = c0 // per_out, -(-c1 // per_out)
                chans = (g0 * per_in, g1 * per_in)
            part.needs[t] = Region((0, h_in), chans)
        return part


_SHARED: list[tuple[weakref.ref, StageGeometry]] = []  # most recently used last
_SHARED_SIZE = 4


def stage_geometry(graph: LayerGraph) -> StageGeometry:
    """The ``StageGeometry`` shared by every pricer of ``graph``: the geometry is device-free,
    so the sub-fleets of an instance (which keep its graph object) reuse the parts already
    built. Keyed by the graph object itself, held weakly: a graph no one else holds any more
    takes its geometry with it (a long-lived process does not keep the last four graphs' parts)."""
    # the list is read from a copy and replaced whole: ``_forget`` may edit it meanwhile (a
    # collection in the middle of this function, or in another thread)
    for entry in list(_SHARED):
        if entry[0]() is graph:
            _SHARED[:] = [e for e in _SHARED if e is not entry] + [entry]
            return entry[1]
    geo = StageGeometry(graph)
    _SHARED[:] = [*_SHARED, (weakref.ref(graph, _forget), geo)][-_SHARED_SIZE:]
    return geo


def _forget(ref: weakref.ref) -> None:
    """Drop the shared geometry of a graph that was collected."""
    _SHARED[:] = [entry for entry in _SHARED if entry[0] is not ref]
