"""Regions of tensors as numpy arrays: a region is rows x channels of a tensor's (H, C) grid.

A rank-4 (N, C, H, W) tensor has rows on axis 2 and channels on axis 1; any other rank has
one row and its channels on the last axis (as ``milp_planner.space.geometry`` counts them).
"""

from __future__ import annotations

import numpy as np

from milp_planner.space.geometry import Region


def region_shape(shape: tuple[int, ...], region: Region) -> tuple[int, ...]:
    """Shape of the array holding ``region`` of a tensor of ``shape``."""
    (r0, r1), (c0, c1) = region.rows, region.chans
    if len(shape) == 4:
        return (shape[0], c1 - c0, r1 - r0, shape[3])
    if not shape:
        return ()
    return tuple(shape[:-1]) + (c1 - c0,)


def region_index(rank: int, region: Region, origin: Region | None = None) -> tuple:
    """Index selecting ``region`` from an array that holds ``origin`` (default: the whole tensor)."""
    (r0, r1), (c0, c1) = region.rows, region.chans
    if origin is not None:
        r0, r1 = r0 - origin.rows[0], r1 - origin.rows[0]
        c0, c1 = c0 - origin.chans[0], c1 - origin.chans[0]
    if rank == 4:
        return (slice(None), slice(c0, c1), slice(r0, r1), slice(None))
    if rank == 0:
        return ()
    return (Ellipsis, slice(c0, c1))


def intersect(a: Region, b: Region) -> Region | None:
    """The box common to ``a`` and ``b``, or None when they do not overlap."""
    r = (max(a.rows[0], b.rows[0]), min(a.rows[1], b.rows[1]))
    c = (max(a.chans[0], b.chans[0]), min(a.chans[1], b.chans[1]))
    if r[0] >= r[1] or c[0] >= c[1]:
        return None
    return Region(r, c)


def take(array: np.ndarray, held: Region, region: Region) -> np.ndarray:
    """The part ``region`` of ``array``, which holds ``held`` of its tensor (a contiguous copy)."""
    part = array[region_index(array.ndim, region, held)]
    return np.require(part, requirements="C")  # a 0-d scalar stays 0-d (ascontiguousarray makes it 1-d)


def put(dest: np.ndarray, dest_region: Region, src: np.ndarray, src_region: Region) -> None:
    """Write ``src`` (holding ``src_region``) into ``dest`` (holding ``dest_region``)."""
    dest[region_index(dest.ndim, src_region, dest_region)] = src
