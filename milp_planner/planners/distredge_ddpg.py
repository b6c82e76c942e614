"""``distredge``: DistrEdge's Optimal Split Decision Search (Hou et al., IPDPS 2022, Alg. 2).

The model is first cut horizontally into layer-volumes by LC-PSS (``distredge_lcpss``,
alpha 0.75, 100 random splits). A DDPG agent then splits the volumes one after another
(an MDP with one step per volume):

* state s_l = (T_{l-1}, H^l, C^l, F^l, S^l): the accumulated latency of every device after
  the previous volume, and the height, depth (channels), filter size and stride of the
  volume's last layer (eq. 7). T is the evaluator's schedule: a stage starts when the
  previous one ends (the sum of the earlier stages' tau), and device d finishes its part at
  start + receive + compute; a device without a part keeps its previous value. Inputs are
  scaled to about [0, 1]: T by the best single-device latency, H, C, F, S by their largest
  value over the volumes (the paper gives no scaling).
* action: |D| - 1 values from the actor's tanh ([A, B] = [-1, 1]); sorted, and mapped to cut
  rows x_i = round(H (x~_i - A) / (B - A)) (eq. 9); device i (index order) computes rows
  [x_{i-1}, x_i) of the volume's last layer; a device with an empty slice gets no part. The
  critic is trained on the unsorted action, as in the paper.
* reward r_l = 0 before the last volume, 1 / T at the last (eq. 8), with T the plan's
  latency as the evaluator computes it (``common.Sim``, the evaluator's stage-by-stage
  bookkeeping), expressed in units of the best single-device latency (so r = T_ref / T, the
  paper's 1/T up to a constant). For the energy objective T is the energy (same scaling).
* Alg. 2: epsilon = 1 - (episode x d_eps)^2; with probability epsilon the action gets
  Gaussian noise N(0, sigma^2); N_b transitions are sampled from the replay buffer for one
  critic and one actor update per step; the best plan of all episodes is returned.

Layers that cannot be split by rows (Flatten, Gemm, global pooling) are not MDP steps: a run
of them is computed whole, in stages of at most search.fusion_limit layers, on the device
that owns most of its input (the paper computes the last fully-connected layers on the
provider with the largest share of the last volume).

Hyper-parameters (Sec. V), option names in brackets: actor {400, 200, 100} and critic
{400, 200, 100, 100} fully connected ReLU layers; learning rates 1e-4 (actor) and 1e-3
(critic), Adam [lr_actor, lr_critic]; gamma 0.99 [gamma]; N_b 64 [batch]; d_eps 1/250
[d_eps]; sigma^2 0.1 with 4 devices and 1 with 16 (linear in between, 0.1 below 4) [sigma2];
LC-PSS alpha 0.75, 100 random splits [alpha, n_random]. Not stated in the paper, chosen
here: target networks updated softly with tau 0.005 [tau]; replay buffer 100000 [buffer];
final layers initialised in U(-3e-3, 3e-3) as in DDPG (Lillicrap et al.); the target's
bootstrap is cut at the last volume (done mask).

Budget [episodes]: the paper trains Max_ep = 4000 episodes. The default here is 300: with
d_eps = 1/250 the paper's own schedule stops exploring after episode 250 (epsilon <= 0), so
300 keeps the whole exploration phase plus 50 greedy episodes, and VGG16 on 4 devices (5
MDP steps, one DDPG update of ~7 ms per step) finishes in about 20 s on two cores.
``-O episodes=4000`` runs the paper's budget; ctx.time_limit stops training early and
returns the best plan so far (``info["stopped_by_time_limit"]``): LC-PSS gets a third of the
limit, the deadline is checked before every MDP step (an episode cut short is dropped), and
without any episode the best single-device plan (the reward's reference) is returned.

Determinism: torch.manual_seed(seed), a numpy Generator(seed) for exploration and
sampling, a separate Generator for LC-PSS, deterministic ATen kernels and
ctx.threads (default 1) intra-op threads: the same seed gives the same plan.
"""

from __future__ import annotations


from milp_planner.deadline import NEVER, Deadline
from milp_planner.errors import PlannerError
from milp_planner.cost.evaluator import EXTERNAL, StagePrice, evaluate
from milp_planner.instance import Instance
from milp_planner.planners.base import Option, Planner, PlanResult, SolveContext
from milp_planner.planners.diapason import TorchState, import_torch

DEFAULTS = {
    "episodes": 300,
    "d_eps": 1 / 250,
    "sigma2": None,
    "batch": 64,
    "gamma": 0.99,
    "lr_actor": 1e-4,
    "lr_critic": 1e-3,
    "tau": 0.005,
    "buffer": 100_000,
    "alpha": 0.75,
    "n_random": 100,
    "volumes": None,  # explicit [[first, last], ...] instead of LC-PSS
}


def _check_volumes(v) -> str | None:
    if not v or not all(isinstance(p, list) and len(p) == 2 and all(type(x) is int and 0 <= x < 10**6 for x in p)
                        for p in v):
        return "must be a list of [first, last] layer ids"
    return None


def default_sigma2(n_dev: int) -> float:
    """0.1 with 4 providers, 1 with 16 (Sec. V); linear in between, 0.1 below 4."""
    if n_dev <= 4:
        return 0.1
    if n_dev >= 16:
        return 1.0
    return 0.1 + (n_dev - 4) * (1.0 - 0.1) / 12


def _options(options: dict, n_dev: int) -> dict:
    unknown = set(options) - set(DEFAULTS)
    if unknown:
        raise PlannerError(f"distredge: unknown option {sorted(unknown)[0]!r} (known: {', '.join(DEFAULTS)})")
    o = {**DEFAULTS, **options}
    if o["sigma2"] is None:
        o["sigma2"] = default_sigma2(n_dev)
    try:
        for k in ("episodes", "batch", "buffer", "n_random"):
            o[k] = int(o[k])
        for k in ("d_eps", "sigma2", "gamma", "lr_actor", "lr_critic", "tau", "alpha"):
            o[k] = float(o[k])
    except (TypeError, ValueError) as e:
        raise PlannerError(f"distredge: bad option value ({e})") from None
    if o["episodes"] < 1 or o["batch"] < 1 or o["buffer"] < o["batch"]:
        raise PlannerError("distredge: episodes >= 1 and buffer >= batch >= 1 are required")
    return o


def _volumes(instance: Instance, o: dict, seed: int, deadline: Deadline = NEVER) -> list[tuple[int, int]]:
    n = len(instance.graph.layers)
    if o["volumes"] is not None:
        vols = [tuple(int(x) for x in v) for v in o["volumes"]]
    else:
        import numpy as np

        from milp_planner.planners.distredge_lcpss import lcpss_volumes

        vols = [tuple(v) for v in lcpss_volumes(instance, np.random.default_rng([seed, 1]),
                                               alpha=o["alpha"], n_random=o["n_random"], deadline=deadline)]
    expect = 0
    for a, b in vols:
        if a != expect or b < a or b >= n:
            raise PlannerError(f"distredge: layer-volumes {vols} do not cover layers 0-{n - 1} in order")
        expect = b + 1
    if expect != n:
        raise PlannerError(f"distredge: layer-volumes {vols} do not cover layers 0-{n - 1}")
    return vols


class _Episode:
    """The MDP: volumes to split (steps) and whole runs between them, priced like the evaluator."""

    def __init__(self, instance: Instance, vols, objective: str):
        from milp_planner.planners.common import Sim

        self.instance = instance
        self.sim = Sim(instance)
        self.objective = objective
        g = instance.graph
        self.n_dev = len(instance.devices)
        # split each volume into maximal row-splittable runs (MDP steps) and the rest (whole)
        self.segments: list[tuple[int, int, bool]] = []
        for a, b in vols:
            i = a
            while i <= b:
                split = g.layers[i].row_splittable
                j = i
                while j + 1 <= b and g.layers[j + 1].row_splittable == split:
                    j += 1
                self.segments.append((i, j, split))
                i = j + 1
        self.steps = [k for k, s in enumerate(self.segments) if s[2]]
        cfg = []
        for k in self.steps:
            layer = g.layers[self.segments[k][1]]
            dep = layer.rowdep
            cfg.append((layer.rows, layer.channels, dep.kernel, dep.stride))
        top = [max(1, max((c[i] for c in cfg), default=1)) for i in range(4)]
        self.cfg = [tuple(c[i] / top[i] for i in range(4)) for c in cfg]
        self.fusion_limit = max(1, instance.search.fusion_limit)
        self.cache: dict = {}

    @property
    def state_dim(self) -> int:
        return self.n_dev + 4

    def _stage(self, owners, st) -> StagePrice:
        """The evaluator's price of one stage (``Sim.price``), cached by stage and state."""
        key = (st, self.sim.key(owners, st[0]))
        hit = self.cache.get(key)
        if hit is None:
            if len(self.cache) > 200_000:
                self.cache.clear()
            hit = self.cache[key] = self.sim.price(owners, st)
        return hit

    def advance(self, owners, st, clock: float, finish: list[float]) -> StagePrice:
        """Price ``st`` started at ``clock``: every device with a part finishes it at clock +
        its receive + compute seconds (written into ``finish``)."""
        sp = self._stage(owners, st)
        for d, _ in st[3]:
            finish[d] = clock + sp.compute[d] + sp.recv[d]
        return sp

    def whole_run(self, first: int, last: int, owners) -> list:
        from milp_planner.planners.common import chunks, owner_of_most

        d = owner_of_most(self.instance, owners, first)
        if d == EXTERNAL:  # pragma: no cover - owner_of_most returns a device
            d = 0
        return [(a, b, "none", ((d, None),)) for a, b in chunks(first, last, self.fusion_limit)]

    def split_stage(self, k: int, cuts: list[int]):
        from milp_planner.planners.common import norm_stage

        first, last, _ = self.segments[k]
        h = self.instance.graph.layers[last].rows
        pts = [0, *cuts, h]
        parts = [(d, (pts[d], pts[d + 1])) for d in range(self.n_dev)]
        return norm_stage(first, last, "rows", parts)


class DistrEdgeDDPG(Planner):
    name = "distredge"
    description = ("DistrEdge: LC-PSS layer-volumes, then a DDPG agent splits each volume by rows "
                   "(Optimal Split Decision Search), trained on the evaluator's latency (PyTorch)")
    source = ("Hou, Guan, Han, Zhang: DistrEdge: Speeding up Convolutional Neural Network Inference on "
              "Distributed Edge Devices, IPDPS 2022, Sec. IV-C, Alg. 2, hyper-parameters of Sec. V")
    seeded = True

    option_specs = (
        Option("episodes", int, 300, "training episodes", ge=1, le=10**7),
        Option("d_eps", float, 1 / 250, "exploration decay per episode", ge=0, le=1),
        Option("sigma2", float, None, "exploration noise variance (default from the device count)", ge=0, le=1e3),
        Option("batch", int, 64, "minibatch", ge=1, le=10**6),
        Option("gamma", float, 0.99, "discount", ge=0, le=1),
        Option("lr_actor", float, 1e-4, "actor learning rate", gt=0, le=10),
        Option("lr_critic", float, 1e-3, "critic learning rate", gt=0, le=10),
        Option("tau", float, 0.005, "target-network update rate", gt=0, le=1),
        Option("buffer", int, 100_000, "replay buffer (>= batch)", ge=1, le=10**8),
        Option("alpha", float, 0.75, "LC-PSS alpha", ge=0, le=1),
        Option("n_random", int, 100, "LC-PSS random splits", ge=1, le=10**6),
        Option("volumes", list, None, "explicit [[first, last], ...] instead of LC-PSS", check=_check_volumes),
    )

    def search(self, instance: Instance, ctx: SolveContext) -> PlanResult:
        torch = import_torch(self.name)
        import numpy as np

        from milp_planner.planners.common import to_plan

        n_dev = len(instance.devices)
        o = _options(self.options, n_dev)
        deadline = ctx.deadline
        # LC-PSS within a third of the limit (it keeps its last completed round)
        vols = _volumes(instance, o, ctx.seed, ctx.part_of_limit(1 / 3))
        env = _Episode(instance, vols, ctx.objective)
        rng = np.random.default_rng(ctx.seed)

        def value_of(stages, lat, en):
            if ctx.objective == "latency":
                return lat
            if ctx.objective == "energy":
                return en
            return evaluate(to_plan(instance, stages), instance, check=False).value(ctx.objective)

        # reference: the best single-device plan (scales the state's T and the reward); it is
        # also the plan returned when the time limit leaves no episode
        ref, ref_stages = _reference(env, value_of)
        best = (ref, ref_stages, 0)
        ref = ref if ref > 0 else 1.0

        with TorchState(torch, ctx.threads):
            torch.manual_seed(ctx.seed)
            agent = _DDPG(torch, env.state_dim, max(1, n_dev - 1), o)
            best, curve, ep_done, stopped = _train(env, agent, rng, o, ref, best, deadline, ctx, value_of)
        plan = to_plan(instance, best[1])
        info = {
            "volumes": [list(v) for v in vols],
            "mdp_steps": len(env.steps),
            "episodes_done": ep_done,
            "best_episode": best[2],
            "best_value_sim": best[0],
            "reference_value": ref,
            "value_curve": curve,
            "options": {k: o[k] for k in DEFAULTS},
            "stopped_by_time_limit": stopped,
        }
        return PlanResult(self.name, "feasible", ctx.objective, plan=plan, info=info,
                          message="time limit reached: best plan so far" if stopped else "")


def _reference(env: _Episode, value_of) -> tuple[float, list | None]:
    """The value and stages of the best single-device plan."""
    ref, ref_stages = float("inf"), None
    for d in range(env.n_dev):
        stages = []
        for a, b, _ in env.segments:
            stages.append((a, b, "none", ((d, None),)))
        lat, en = env.sim.run(stages)
        v = value_of(stages, lat, en)
        if v < ref or ref_stages is None:
            ref, ref_stages = v, stages
    return ref, ref_stages


def _train(env: _Episode, agent: _DDPG, rng, o: dict, ref: float, best: tuple, deadline: Deadline, ctx,
           value_of) -> tuple[tuple, list[float], int, bool]:
    """(best (value, stages, episode), value curve, episodes done, stopped by the deadline) of Alg. 2's training."""
    curve = []
    ep_done = 0
    n_steps = len(env.steps)
    for episode in range(1, o["episodes"] + 1):
        if deadline.passed():
            return best, curve, ep_done, True
        eps = 1.0 - (episode * o["d_eps"]) ** 2
        done = _run_episode(env, agent, rng, o, ref, eps, deadline, value_of)
        if done is None:
            return best, curve, ep_done, True
        total, stages = done
        curve.append(total)
        ep_done = episode
        if total < best[0] or best[2] == 0:
            best = (total, list(stages), episode)
        if episode % 20 == 0 or episode == 1:
            ctx.report(phase=f"distredge episode {episode}/{o['episodes']}", incumbent=best[0])
        if n_steps == 0 or env.n_dev == 1:
            break  # nothing to learn: every episode is the same plan
    return best, curve, ep_done, False


class _Rollout:
    """One episode's plan so far: its stages, who owns which tensor, the clock, energy and finish times."""

    def __init__(self, env: _Episode):
        self.env = env
        self.owners = env.sim.initial()
        self.clock = 0.0
        self.energy = 0.0
        self.finish = [0.0] * env.n_dev
        self.stages = []
        self.seg = 0

    def push(self, st) -> None:
        """Append stage ``st``, advancing owners, clock, energy and finish times."""
        sp = self.env.advance(self.owners, st, self.clock, self.finish)
        self.owners = sp.owners
        self.clock += sp.tau
        self.energy += sp.energy
        self.stages.append(st)

    def run_whole_until(self, stop: int) -> None:
        """Append the whole (unsplit) stages of the segments before segment ``stop``."""
        while self.seg < stop:
            a, b, _ = self.env.segments[self.seg]
            for st in self.env.whole_run(a, b, self.owners):
                self.push(st)
            self.seg += 1


def _run_episode(env: _Episode, agent: _DDPG, rng, o: dict, ref: float, eps: float, deadline: Deadline,
                 value_of) -> tuple[float, list] | None:
    """(value, stages) of one episode, training the agent on its transitions; None if the deadline cut it."""
    import numpy as np

    roll = _Rollout(env)
    pending = None
    for step, k in enumerate(env.steps):
        if deadline.passed():  # the episode is dropped: the best one so far is returned
            return None
        roll.run_whole_until(k)
        state = [f / ref for f in roll.finish] + list(env.cfg[step])
        raw = agent.act(state)
        if rng.random() < eps:
            raw = raw + rng.normal(0.0, o["sigma2"] ** 0.5, size=raw.shape)
        raw = np.clip(raw, -1.0, 1.0)
        h = env.instance.graph.layers[env.segments[k][1]].rows
        cuts = sorted(_round_half_up(h * (x + 1.0) / 2.0) for x in raw) if env.n_dev > 1 else []
        roll.push(env.split_stage(k, cuts))
        roll.seg = k + 1
        if pending is not None:
            # the previous step's transition is complete once s_l is observed
            agent.store(pending[0], pending[1], 0.0, state, False)
            agent.update(rng)
        pending = (state, raw)
    roll.run_whole_until(len(env.segments))
    gs, ge = env.sim.gather(roll.owners)
    total = value_of(roll.stages, roll.clock + gs, roll.energy + ge)
    if pending is not None:
        final_state = [f / ref for f in roll.finish] + [0.0] * 4
        agent.store(pending[0], pending[1], ref / total if total > 0 else 0.0, final_state, True)
        agent.update(rng)
    return total, roll.stages


def _round_half_up(x: float) -> int:
    import math

    return int(math.floor(x + 0.5))


class _DDPG:
    """Actor-critic with target networks and a replay buffer (Lillicrap et al., 2016)."""

    def __init__(self, torch, state_dim: int, action_dim: int, o: dict):
        import numpy as np

        nn = torch.nn
        self.torch, self.np, self.o = torch, np, o
        f32 = torch.float32

        def mlp(inp, hidden, out, final=None):
            layers, last = [], inp
            for h in hidden:
                layers += [nn.Linear(last, h), nn.ReLU()]
                last = h
            head = nn.Linear(last, out)
            nn.init.uniform_(head.weight, -3e-3, 3e-3)
            nn.init.uniform_(head.bias, -3e-3, 3e-3)
            layers.append(head)
            if final is not None:
                layers.append(final)
            return nn.Sequential(*layers).to(f32)

        self.actor = mlp(state_dim, (400, 200, 100), action_dim, nn.Tanh())
        self.critic = mlp(state_dim + action_dim, (400, 200, 100, 100), 1)
        self.actor_t = mlp(state_dim, (400, 200, 100), action_dim, nn.Tanh())
        self.critic_t = mlp(state_dim + action_dim, (400, 200, 100, 100), 1)
        self.actor_t.load_state_dict(self.actor.state_dict())
        self.critic_t.load_state_dict(self.critic.state_dict())
        self.opt_a = torch.optim.Adam(self.actor.parameters(), lr=o["lr_actor"])
        self.opt_c = torch.optim.Adam(self.critic.parameters(), lr=o["lr_critic"])
        cap = o["buffer"]
        self.s = np.zeros((cap, state_dim), dtype=np.float32)
        self.a = np.zeros((cap, action_dim), dtype=np.float32)
        self.r = np.zeros((cap, 1), dtype=np.float32)
        self.s2 = np.zeros((cap, state_dim), dtype=np.float32)
        self.done = np.zeros((cap, 1), dtype=np.float32)
        self.n = 0
        self.pos = 0
        self.cap = cap

    def act(self, state):
        torch = self.torch
        with torch.no_grad():
            x = torch.tensor([state], dtype=torch.float32)
            return self.actor(x)[0].numpy().astype(float)

    def store(self, s, a, r, s2, done) -> None:
        i = self.pos
        self.s[i], self.a[i], self.r[i, 0], self.s2[i], self.done[i, 0] = s, a, r, s2, float(done)
        self.pos = (self.pos + 1) % self.cap
        self.n = min(self.n + 1, self.cap)

    def update(self, rng) -> None:
        o, torch = self.o, self.torch
        if self.n < o["batch"]:
            return
        idx = rng.integers(0, self.n, size=o["batch"])
        s, a, r = torch.from_numpy(self.s[idx]), torch.from_numpy(self.a[idx]), torch.from_numpy(self.r[idx])
        s2, done = torch.from_numpy(self.s2[idx]), torch.from_numpy(self.done[idx])
        with torch.no_grad():
            q2 = self.critic_t(torch.cat([s2, self.actor_t(s2)], dim=1))
            y = r + o["gamma"] * (1.0 - done) * q2
        q = self.critic(torch.cat([s, a], dim=1))
        loss_c = ((y - q) ** 2).mean()
        self.opt_c.zero_grad()
        loss_c.backward()
        self.opt_c.step()
        loss_a = -self.critic(torch.cat([s, self.actor(s)], dim=1)).mean()
        self.opt_a.zero_grad()
        loss_a.backward()
        self.opt_a.step()
        tau = o["tau"]
        with torch.no_grad():
            for net, tgt in ((self.actor, self.actor_t), (self.critic, self.critic_t)):
                for p, pt in zip(net.parameters(), tgt.parameters()):
                    pt.mul_(1.0 - tau).add_(p, alpha=tau)
