"""The flow floor: energy and period bounds that count the transfers the layer graph forces.

The compute-only and fluid floors of ``milp_planner.cost.floors`` leave communication out, so
on fleets whose most efficient device sits behind a slow link they miss what every plan pays to
bring the model input there (DistrEdge's VGG16 on 16 devices: 0.596 J against plans of
0.622-0.638 J, most of the difference the input's receive energy). This floor is a linear
program over what any plan does, layer by layer:

- ``c[l, d]``: the share of layer l's output cells (rows x channels) that device d computes
  (halo rows included). Every plan computes each needed cell somewhere: ``sum_d c[l, d] >= m_l``
  (the coverage ``m_l`` of ``floors``). A part's compute time is at least ``(o + a) x c``, the
  chord of the affine time floor ``o + a c`` of ``floors`` (c <= 1); its energy is that times
  the compute power.
- ``R[t, d]``: the share of tensor t's cells that device d receives. A part computing a share
  ``c`` of layer l' needs at least ``alpha x c`` of each tensor t it reads, where ``alpha`` is
  the least (needed input rows / input rows) / (computed rows / output rows) over every row
  range of l' (``row_ratio``; a channel part needs every input row and at least its share of the
  input channels, so ``alpha <= 1`` holds for it too). Locally a device holds of t only what it
  computed of t's producer (a part owns a subset of what it computed, and computes a layer in one
  stage only), or all of it when t is a graph input and d the source device. So
  ``R[t, d] >= alpha x c[l', d] - c[producer, d]`` for every reader l' (the stage reading t
  receives at least that; receiving in several stages only adds).
- ``S[t, d]``: the share of graph output t that device d sends to the sink in the gather:
  ``sum_{d != sink} S[t, d] >= 1 - c[producer, sink]`` and ``S[t, d] <= c[producer, d]``
  (owned ranges partition the output; the sink device sends nothing to itself).

A received byte costs at least the cheapest link into d (from any other device, or the source
for a graph input): seconds ``1 / bandwidth``, energy ``(tx of the sender + rx of d) /
bandwidth`` (an external node draws no power); message latencies only add.

- **Energy** ``>=`` the LP's least total energy.
- **Period** ``>=`` ``sum_d w_d load_d`` for weights ``w >= 0`` of sum at most 1, where
  ``load_d`` is d's compute plus receive seconds (with a device sink the gather is its
  receive; on a shared medium an extra "device" carries every transfer). The weights are the
  duals of the LP ``min T, T >= load_d``.

Each bound is recomputed from the LP's dual values by weak duality in plain float arithmetic
(every variable is boxed, so any nonnegative duals give a valid bound), lowered by a relative
1e-9: no solver tolerance can make it invalid. ``tests/test_flow_floor.py`` checks it against
every plan of the tiny instances.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from milp_planner.deadline import NEVER, Deadline
from milp_planner.instance import Instance
from milp_planner.instance.network import Network
from milp_planner.model.graph import RowDep, input_rows

_MARGIN = 1e-9  # relative, on the recomputed bound (float sums of a few thousand terms)
LP_TIME_LIMIT = 30.0  # seconds for the LP without a deadline
MIN_LP_S = 0.02  # less time left than this: no LP
MAX_RATIO_ROWS = 512  # row_ratio's exact scan is quadratic in the rows: above this, 0 (sound)


@dataclass(frozen=True)
class FlowFloor:
    """The flow floor of one objective: ``value`` (proven), and the LP's own optimum."""

    value: float
    lp_value: float


@lru_cache(maxsize=1024)
def row_ratio(dep: RowDep, h_out: int, h_in: int) -> float:
    """min over output row ranges [a, b) of (|input_rows(dep, [a, b))| / h_in) / ((b - a) / h_out):
    a row part computing a share c of the output reads at least ``ratio x c`` of the input."""
    if h_out <= 0 or h_in <= 0:
        return 0.0
    if h_out > MAX_RATIO_ROWS:
        return 0.0
    best = float("inf")
    if dep.kind in ("identity", "window"):
        a = np.concatenate([np.arange(h_out - r + 1) for r in range(1, h_out + 1)])
        r = np.concatenate([np.full(h_out - r + 1, r) for r in range(1, h_out + 1)])
        b = a + r
        if dep.kind == "identity":
            lo, hi = a, b
        else:
            s, p, k, d = dep.stride, dep.pad_top, dep.kernel, dep.dilation
            lo, hi = a * s - p, (b - 1) * s - p + (k - 1) * d + 1
        n = np.clip(np.minimum(hi, h_in) - np.maximum(lo, 0), 0, None)
        best = float(np.min((n / h_in) / (r / h_out)))
    else:
        for r in range(1, h_out + 1):
            for a in range(0, h_out - r + 1):
                iv = input_rows(dep, (a, a + r), h_in)
                n = max(0, iv[1] - iv[0])
                best = min(best, (n / h_in) / (r / h_out))
    return max(0.0, min(best, 1.0))


def flow_floor(instance: Instance, objective: str, deadline: Deadline = NEVER) -> FlowFloor | None:
    """The flow floor of ``objective`` (``energy`` or ``period``) over every plan of
    ``instance``, or None when the LP fails or is not solved by ``deadline`` (the caller keeps its other floors)."""
    if objective not in ("energy", "period"):
        raise ValueError(f"the flow floor bounds energy and period, not {objective!r}")
    try:
        lp = _FlowLP(instance)
        lp.deadline = deadline
        return lp.energy() if objective == "energy" else lp.period()
    except _LPFailed:
        return None


class _LPFailed(Exception):
    pass


class _FlowLP:
    """The constraints of the module docstring: ``A x >= b``, ``0 <= x <= 1``; the columns
    (``_Column``) are the c, R and S shares, with their seconds and joules."""

    deadline: Deadline = NEVER  # the LP's own: past it, no floor

    def __init__(self, instance: Instance):
        from milp_planner.cost.floors import _coverage, _time_floors

        net = instance.network
        self.n_dev, self.shared = len(instance.devices), net.medium == "shared"
        self.sink = None if net.sink.external else net.sink.device
        self.cover = _coverage(instance)
        times = _time_floors(instance)
        self.cols: list[_Column] = []
        self.c: dict[tuple[int, int], int] = {}  # (layer, device) -> the column of c[l, d]
        self.affine: dict[int, tuple[float, float]] = {}  # c's column -> (overhead, slope) of g
        self.receive: dict[tuple[str, int], int] = {}  # (tensor, device) -> the column of R[t, d]
        links = _Links.of(instance)
        self._add_compute_columns(instance, times)
        rows = self._cover_rows(instance) + self._receive_rows(instance, links) + self._gather_rows(instance, links)
        #: per row, what it states: ("cover", layer), ("receive", tensor, device, reader),
        #: ("gather", tensor) or ("gather-cap", tensor, device) (``formulations.flow_togo``)
        self.row_tags: list[tuple] = [tag for _, _, tag in rows]
        if not self.cols:
            raise _LPFailed()
        self.A = _Sparse.of_rows([row for row, _, _ in rows], len(self.cols))
        self.b = np.array([rhs for _, rhs, _ in rows], dtype=float)
        self.joules = np.array([col.joules for col in self.cols], dtype=float)

    def _new_col(self, kind: str, device: int, secs: float, joules: float) -> int:
        """Appends a column to ``cols`` and returns its index."""
        self.cols.append(_Column(kind, device, secs, joules))
        return len(self.cols) - 1

    def _add_compute_columns(self, instance: Instance, times) -> None:
        """The c columns of every needed layer on every device (``c``, ``affine``)."""
        power = np.array([float(d.power.compute_w) for d in instance.devices])
        for layer in instance.graph.layers:
            if self.cover.get(layer.id, 0.0) <= 0:
                continue
            for d in range(self.n_dev):
                fl = times[d][layer.id]
                # the chord: o + a c >= (o + a) c on [0, 1]; the per-stage stage_overhead_s is left
                # out (it only adds cost, so the LP stays a lower bound)
                slope = max(fl.overhead, 0.0) + fl.slope
                self.c[layer.id, d] = self._new_col("compute", d, slope, float(power[d]) * slope)
                self.affine[self.c[layer.id, d]] = (max(fl.overhead, 0.0), max(fl.slope, 0.0))

    def _cover_rows(self, instance: Instance) -> list[_Row]:
        """The coverage rows ``sum_d c[l, d] >= m_l``."""
        rows: list[_Row] = []
        for layer in instance.graph.layers:
            m = self.cover.get(layer.id, 0.0)
            if m > 0:
                rows.append(({self.c[layer.id, d]: 1.0 for d in range(self.n_dev)}, m, ("cover", layer.id)))
        return rows

    def _receive_rows(self, instance: Instance, links: _Links) -> list[_Row]:
        """The receive rows ``R[t, d] >= alpha x c[l', d] - c[producer, d]`` of every tensor read
        by a needed layer, adding the R columns (``receive``)."""
        from milp_planner.space.geometry import tensor_grid

        g = instance.graph
        net = instance.network
        cover = self.cover
        sec_in, joule_in = links.cheapest_in()
        src = None if net.source.external else net.source.device
        rows: list[_Row] = []
        for t in sorted({t for layer in g.layers for t in layer.inputs if cover.get(layer.id, 0.0) > 0}):
            readers = [layer for layer in g.layers if t in layer.inputs and cover.get(layer.id, 0.0) > 0]
            nbytes = g.elements(t) * instance.dtype_bytes
            producer = g.producer(t)
            is_input = producer is None
            if is_input and t not in g.inputs:
                continue
            h_in = tensor_grid(g, t)[0]
            for d in range(self.n_dev):
                if is_input and src == d:
                    continue  # the source device holds the whole input
                if is_input:
                    s_b, e_b = links.from_source(src, d)
                else:
                    s_b, e_b = float(sec_in[d]), float(joule_in[d])
                if not np.isfinite(s_b):
                    continue  # nothing can reach d: it cannot read t, and R would not help
                rows += self._reader_rows(t, d, readers, producer, h_in, nbytes * s_b, nbytes * e_b)
        return rows

    def _reader_rows(self, t: str, d: int, readers: list, producer: int | None, h_in: int,
                     secs: float, joules: float) -> list[_Row]:
        """One receive row of ``R[t, d]`` per reader of t that needs some of it, adding the R
        column (of ``secs`` and ``joules`` at share 1) when the first one does."""
        c = self.c
        col = None
        rows: list[_Row] = []
        for reader in readers:
            alpha = min(1.0, row_ratio(reader.rowdep, reader.rows, h_in)) if reader.row_splittable else 1.0
            if alpha <= 0:
                continue
            if col is None:
                col = self._new_col("receive", d, secs, joules)
                self.receive[t, d] = col
            row = {col: 1.0, c[reader.id, d]: -alpha}
            if producer is not None and (producer, d) in c:
                row[c[producer, d]] = row.get(c[producer, d], 0.0) + 1.0
            rows.append((row, 0.0, ("receive", t, d, reader.id)))
        return rows

    def _gather_rows(self, instance: Instance, links: _Links) -> list[_Row]:
        """The gather rows ``sum_{d != sink} S[t, d] >= 1 - c[producer, sink]`` of every graph
        output, then their caps ``c - S >= 0``, adding the S columns."""
        g = instance.graph
        c = self.c
        rows: list[_Row] = []
        caps: list[tuple[str, int, int, int]] = []  # (tensor, device, S column, c column): S <= c
        for t in g.outputs:
            producer = g.producer(t)
            if producer is None or self.cover.get(producer, 0.0) <= 0:
                continue
            nbytes = g.elements(t) * instance.dtype_bytes
            row: dict[int, float] = {}
            for d in range(self.n_dev):
                if d == self.sink:
                    row[c[producer, d]] = 1.0  # what the sink computed it does not receive
                    continue
                s_b, e_b = links.to_sink(self.sink, d)
                col = self._new_col("gather", d, nbytes * s_b, nbytes * e_b)
                row[col] = 1.0
                caps.append((t, d, col, c[producer, d]))
            rows.append((row, 1.0, ("gather", t)))
        return rows + [({c_col: 1.0, s_col: -1.0}, 0.0, ("gather-cap", t, d)) for t, d, s_col, c_col in caps]

    def loads(self) -> np.ndarray:
        """(rows, columns): the seconds each column adds to each device's period load (its
        compute and receive; with a device sink the gather is its receive) and, on a shared
        medium, to one more row that carries every transfer."""
        out = np.zeros((self.n_dev + (1 if self.shared else 0), len(self.cols)))
        for j, col in enumerate(self.cols):
            if col.kind == "compute" or col.kind == "receive":
                out[col.device, j] = col.secs
            elif self.sink is not None:
                out[self.sink, j] = col.secs
            if self.shared and col.kind != "compute":
                out[self.n_dev, j] = col.secs
        return out

    def _solve(self, cost: np.ndarray, loads: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """``min cost.x`` over the constraints, or with ``loads`` (rows, columns) ``min T`` with
        ``T >= each row's load`` (T the last column): the optimum and the row duals (HiGHS)."""
        import highspy

        A = self.A
        rows, cols, vals = A.rows, A.cols, A.vals
        n, m = A.n, A.m
        b = self.b
        upper = np.ones(n)
        if loads is not None:
            lr, lc = np.nonzero(loads)
            k = loads.shape[0]
            rows = np.concatenate([rows, m + lr, m + np.arange(k)])
            cols = np.concatenate([cols, lc, np.full(k, n)])
            vals = np.concatenate([vals, -loads[lr, lc], np.ones(k)])
            cost = np.concatenate([np.zeros(n), [1.0]])
            b = np.concatenate([b, np.zeros(k)])
            upper = np.concatenate([upper, [highspy.kHighsInf]])
            n, m = n + 1, m + k
        order = np.lexsort((rows, cols))
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = n, m
        lp.col_cost_ = np.asarray(cost, dtype=float)
        lp.col_lower_, lp.col_upper_ = np.zeros(n), upper
        lp.row_lower_, lp.row_upper_ = b, np.full(m, highspy.kHighsInf)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = np.searchsorted(cols[order], np.arange(n + 1))
        lp.a_matrix_.index_, lp.a_matrix_.value_ = rows[order], vals[order]
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        left = min(LP_TIME_LIMIT, self.deadline.left())
        if left < MIN_LP_S:
            raise _LPFailed()
        h.setOptionValue("time_limit", float(left))
        try:
            h.passModel(lp)
            h.run()
            if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
                raise _LPFailed()
            sol = h.getSolution()
            return float(h.getInfo().objective_function_value), np.asarray(sol.row_dual, dtype=float)
        except _LPFailed:
            raise
        except Exception:  # noqa: BLE001 - a failed LP only loses the floor
            raise _LPFailed() from None
        finally:
            h.resetGlobalScheduler(True)  # as formulations.caps: a later solve may use other threads

    def _safe(self, cost: np.ndarray, y: np.ndarray) -> float:
        """Weak duality for ``min cost.x, A x >= b, 0 <= x <= 1`` at duals ``y`` (clipped to
        >= 0): ``b.y + sum_j min(0, (cost - A^T y)_j)``, lowered by the margin."""
        y = np.clip(np.nan_to_num(y, nan=0.0, posinf=0.0, neginf=0.0), 0.0, None)
        reduced = cost - self.A.rmatvec(y)
        value = float(self.b @ y + np.minimum(reduced, 0.0).sum())
        return max(0.0, value * (1 - _MARGIN) if value > 0 else value)

    def energy(self) -> FlowFloor:
        value, y = self._solve(self.joules)
        return FlowFloor(self._safe(self.joules, y), value)

    def period(self) -> FlowFloor:
        """``sum_r w_r load_r`` with the duals of ``T >= load_r`` as the weights (scaled to sum
        at most 1), bounded by weak duality with the LP's other duals."""
        loads = self.loads()
        value, y_all = self._solve(np.zeros(len(self.cols)), loads)
        y_all = np.clip(y_all, 0.0, None)
        m = self.A.m
        w = y_all[m:]
        if w.sum() <= 0:
            raise _LPFailed()
        w = w / max(w.sum(), 1.0)
        return FlowFloor(self._safe(w @ loads, y_all[:m]), value)


@dataclass(frozen=True)
class _Sparse:
    """A sparse (m, n) matrix as coordinates (the LP is small; no scipy import on this path)."""

    rows: np.ndarray
    cols: np.ndarray
    vals: np.ndarray
    m: int
    n: int

    @classmethod
    def of_rows(cls, rows: list[dict[int, float]], n: int) -> _Sparse:
        """The matrix whose rows are ``rows`` (column -> coefficient), with ``n`` columns."""
        ri, ci, vi = [], [], []
        for i, row in enumerate(rows):
            for j, v in row.items():
                ri.append(i)
                ci.append(j)
                vi.append(v)
        return cls(np.array(ri, dtype=np.int64), np.array(ci, dtype=np.int64), np.array(vi, dtype=float),
                   len(rows), n)

    def rmatvec(self, y: np.ndarray) -> np.ndarray:
        """``A^T y``."""
        return np.bincount(self.cols, weights=self.vals * y[self.rows], minlength=self.n)


@dataclass(frozen=True)
class _Column:
    """One LP column: a share computed (``compute``), received (``receive``) or sent to the
    sink (``gather``) by ``device``, and its seconds and joules at share 1."""

    kind: str
    device: int
    secs: float
    joules: float


_Row = tuple[dict[int, float], float, tuple]  # an LP row: coefficients, right-hand side, tag


class _Links(NamedTuple):
    """The devices' transmit and receive watts and the bandwidths (``[sender][receiver]``)."""

    net: Network
    tx: np.ndarray
    rx: np.ndarray
    bw: np.ndarray

    @classmethod
    def of(cls, instance: Instance) -> _Links:
        """The links of ``instance``."""
        tx = np.array([float(d.power.tx_w) for d in instance.devices])
        rx = np.array([float(d.power.rx_w) for d in instance.devices])
        return cls(instance.network, tx, rx, np.array(instance.network.bandwidth_Bps, dtype=float))

    def cheapest_in(self) -> tuple[np.ndarray, np.ndarray]:
        """Per device, the cheapest second and joule per byte into it from another device."""
        tx, rx, bw = self.tx, self.rx, self.bw
        n_dev = len(tx)
        off = ~np.eye(n_dev, dtype=bool)
        inv = np.where(off, 1.0 / np.where(bw > 0, bw, np.inf), np.inf)  # [sender][receiver]
        sec_in = inv.min(axis=0) if n_dev > 1 else np.full(n_dev, np.inf)
        joule_in = ((tx[:, None] + rx[None, :]) * inv).min(axis=0) if n_dev > 1 else np.full(n_dev, np.inf)
        return sec_in, joule_in

    def from_source(self, src: int | None, d: int) -> tuple[float, float]:
        """Seconds and joules per byte of a graph input into device ``d`` from the source."""
        if src is None:
            s_b = 1.0 / self.net.source.bandwidth_Bps[d]
            return s_b, float(self.rx[d]) * s_b
        s_b = 1.0 / self.bw[src][d]
        return s_b, float(self.tx[src] + self.rx[d]) * s_b

    def to_sink(self, sink: int | None, d: int) -> tuple[float, float]:
        """Seconds and joules per byte that device ``d`` sends to the sink."""
        if sink is None:
            s_b = 1.0 / self.net.sink.bandwidth_Bps[d]
            return s_b, float(self.tx[d]) * s_b
        s_b = 1.0 / self.bw[d][sink]
        return s_b, float(self.tx[d] + self.rx[sink]) * s_b
