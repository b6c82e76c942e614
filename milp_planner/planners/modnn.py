"""``modnn``: MoDNN's Biased One-Dimensional Partition (BODP), layer by layer.

Source: MoDNN, Mao et al., DATE 2017, as described in DIAPASON (DATE 2024) and DistrEdge
(IPDPS 2022): every convolutional layer's output feature map is cut along one dimension into
one slice per device, the slice sizes biased by the devices' computing capabilities; fully
connected layers are split by output neurons. No communication awareness, no fusion.

Our choices where the papers are silent:
  * computing capability = the docs/model.md capacity speed (1 / the device's time for the whole
    model alone); rows (or output neurons) are split in that proportion by largest remainder
    over all devices, in instance order, so no part is empty (a layer with fewer rows than
    devices goes to the fastest devices, one row each);
  * every layer is its own stage (no fusion), on all devices (``max_parts`` is not consulted,
    so such plans can be out of the space);
  * layers that are neither row- nor channel-splittable (Flatten, global pooling, Softmax,
    ...) run whole on the fastest device, since BODP ignores communication;
  * MoDNN's sparse-FC clustering (MSCC) is not modelled: FC layers are split densely.
"""

from __future__ import annotations

from milp_planner.planners.base import Planner, SolveContext
from milp_planner.planners.common import fastest_device, single, speed_weights, split_stage, to_plan


def bodp_stages(instance, weights=None) -> list:
    g = instance.graph
    w = list(weights) if weights is not None else speed_weights(instance)
    devs = list(range(len(instance.devices)))
    fast = fastest_device(instance)
    out = []
    for layer in g.layers:
        i = layer.id
        if layer.row_splittable and layer.rows > 1:
            out.append(split_stage(i, i, "rows", layer.rows, devs, w))
        elif layer.channel_splittable and layer.channels > 1:
            out.append(split_stage(i, i, "channels", layer.channels, devs, w))
        else:
            out.append(single(i, i, fast))
    return out


class MoDNNPlanner(Planner):
    name = "modnn"
    description = "BODP: each layer's rows (FC: output neurons) split in proportion to device speed"
    source = "MoDNN, Mao et al., DATE 2017 (as described in DIAPASON, DATE 2024)"

    def search(self, instance, ctx: SolveContext):
        return to_plan(instance, bodp_stages(instance), self.name)
