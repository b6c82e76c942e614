"""Link groups: which regions of a layout are held within one machine (``Device.node``).

Devices with the same non-empty ``node`` are units of one machine (a board's CPU and GPU);
their links to each other are usually far faster than the links between machines. The
layout relaxation (``formulations.relaxation``) drops the devices from a layout, so without
more it must let a device receive the second region of a tensor over its fastest link (its
board sibling's) even when the sibling owns nothing. With link groups, a layout also records
how its regions fall into *blocks*, the regions held by the devices of one node, as labels
numbered by first appearance (``canonical_labels``); the devices and the nodes stay out.

From such a layout a device ``d`` receives, for one choice of the block its own node holds
(or none): that block's regions but the one it claims over its in-node links, and every other
region over its links from other nodes (each ranked fastest first, as the relaxation ranks
links). The least over the choices is a lower bound on every exact state of the layout.

Options at the type level (``formulations.symmetry``: one device order per sequence of
orbits) do not fix which parts share a node; ``node_patterns`` lists, per sequence of orbits,
every partition of the parts into nodes some real device order gives.

>>> import numpy as np
>>> canonical_labels(np.array([[7, 7, 3, 5], [2, 4, 4, 2]]))
array([[0, 0, 1, 2],
       [0, 1, 1, 0]])
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from milp_planner.instance import Instance

#: most real device orders enumerated to list the node patterns of each length of order
MAX_ORDERS = 2_000_000
#: seconds per byte and per message of a link a device cannot have (padding of the ranked
#: links; no exact state uses it, so it never decides a bound)
NO_LINK = 1.0


def node_ids(instance: Instance) -> np.ndarray | None:
    """Per device, the id of its link group (its node, or itself without one); None when
    every group is a single device (the layouts then need no blocks)."""
    ids: dict[str, int] = {}
    out = []
    for d, dev in enumerate(instance.devices):
        key = dev.node if dev.node else f"\0{d}"
        out.append(ids.setdefault(key, len(ids)))
    arr = np.array(out, dtype=np.int64)
    return None if len(ids) == len(arr) else arr


def canonical_labels(nodes: np.ndarray) -> np.ndarray:
    """Per row, the node ids relabelled 0, 1, ... by first appearance (equal ids, equal
    labels): the blocks of the row's regions without the nodes' names."""
    nodes = np.atleast_2d(np.asarray(nodes))
    rows, m = nodes.shape
    lab = np.full((rows, m), -1, dtype=np.int64)
    fresh = np.zeros(rows, dtype=np.int64)
    for j in range(m):
        for i in range(j):
            same = (nodes[:, j] == nodes[:, i]) & (lab[:, j] < 0)
            lab[same, j] = lab[same, i]
        new = lab[:, j] < 0
        lab[new, j] = fresh[new]
        fresh[new] += 1
    return lab


def node_patterns(orbit_of: np.ndarray, node_of: np.ndarray, k: int) -> dict[tuple, np.ndarray] | None:
    """Per sequence of ``k`` orbits (a tuple of orbit ids), the distinct partitions of its
    parts into nodes (canonical labels, one row each) over every real order of ``k`` distinct
    devices with those orbits. None when there are more than ``MAX_ORDERS`` orders."""
    n = len(node_of)
    if k > n or math.perm(n, k) > MAX_ORDERS:
        return None
    orders = np.array(list(itertools.permutations(range(n), k)), dtype=np.int64).reshape(-1, k)
    labels = canonical_labels(node_of[orders])
    seqs = orbit_of[orders]
    both = np.unique(np.concatenate([seqs, labels], axis=1), axis=0)
    out: dict[tuple, list] = {}
    for row in both:
        out.setdefault(tuple(int(x) for x in row[:k]), []).append(row[k:])
    return {key: np.array(rows, dtype=np.int64) for key, rows in out.items()}


def grouped_links(instance: Instance, node_of: np.ndarray, width: int):
    """Per device, its incoming links from its own node's other devices and from every
    other node, each ranked as ``relaxation.ranked_incoming_links`` ranks them (seconds per
    byte fastest first, per message smallest first), padded with ``NO_LINK`` to ``width``:
    four (devices, width) arrays (in s/byte, in s/message, out s/byte, out s/message)."""
    net = instance.network
    n = len(node_of)
    arrays = [np.full((n, width), NO_LINK) for _ in range(4)]
    for d in range(n):
        for pos, senders in enumerate(([s for s in range(n) if s != d and node_of[s] == node_of[d]],
                                       [s for s in range(n) if node_of[s] != node_of[d]])):
            inv = sorted(1.0 / net.bandwidth_Bps[s][d] for s in senders)[:width]
            lat = sorted(float(net.latency_s[s][d]) for s in senders)[:width]
            arrays[2 * pos][d, :len(inv)] = inv
            arrays[2 * pos + 1][d, :len(lat)] = lat
    return tuple(arrays)
