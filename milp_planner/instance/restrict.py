"""An instance restricted to some of its devices (a sub-fleet).

The sub-fleet keeps the named devices in the instance's order, the rows and columns of the
network matrices between them, the medium, the search space, the caps and the objective.
Every plan of the sub-fleet names only its devices, so it is a plan of the whole fleet; its
cut vectors are in the fleet's space too (``capacity`` cuts come from the speeds of any
``k`` devices, and the sub-fleet's devices are some of the fleet's). A device that is the
source or the sink must be kept; an external source or sink keeps its links to the kept
devices. Callers still score a sub-fleet plan with the whole instance's evaluator.
"""

from __future__ import annotations

from dataclasses import replace

from milp_planner.errors import PlannerError
from milp_planner.instance.network import Endpoint, Network
from milp_planner.instance.types import Instance


def endpoint_devices(instance: Instance) -> tuple[int, ...]:
    """Indices of the devices the source and the sink are (none when both are external)."""
    ends = {e.device for e in (instance.network.source, instance.network.sink) if e.device is not None}
    return tuple(sorted(ends))


def restrict_devices(instance: Instance, names) -> Instance:
    """``instance`` with only the devices named in ``names`` (kept in the instance's order).

    Raises ``PlannerError`` for an unknown name, an empty selection or one that drops the
    source or sink device."""
    wanted = set(names)
    known = set(instance.device_names)
    unknown = sorted(wanted - known)
    if unknown:
        raise PlannerError(f"{instance.name}: no device {unknown[0]!r} to restrict to")
    keep = [i for i, d in enumerate(instance.devices) if d.name in wanted]
    if not keep:
        raise PlannerError(f"{instance.name}: a sub-fleet needs at least one device")
    for i in endpoint_devices(instance):
        if i not in keep:
            raise PlannerError(f"{instance.name}: a sub-fleet must keep the source/sink device "
                               f"{instance.devices[i].name!r}")
    index = {old: new for new, old in enumerate(keep)}
    net = instance.network

    def end(e: Endpoint) -> Endpoint:
        if e.device is not None:
            return Endpoint(device=index[e.device])
        return Endpoint(bandwidth_Bps=tuple(e.bandwidth_Bps[i] for i in keep),
                        latency_s=tuple(e.latency_s[i] for i in keep))

    sub_net = Network(bandwidth_Bps=tuple(tuple(net.bandwidth_Bps[a][b] for b in keep) for a in keep),
                      latency_s=tuple(tuple(net.latency_s[a][b] for b in keep) for a in keep),
                      medium=net.medium, source=end(net.source), sink=end(net.sink))
    return replace(instance, devices=tuple(instance.devices[i] for i in keep), network=sub_net)
