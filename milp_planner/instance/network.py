"""The network between devices: bandwidth and latency matrices, medium, source and sink.

Numbers are stored in base units: bytes per second and seconds. Devices are referred to by
their index in ``Instance.devices``.
"""

from __future__ import annotations

from dataclasses import dataclass

MEDIA = ("switched", "shared")


@dataclass(frozen=True)
class Endpoint:
    """Where the model input comes from (source) or the outputs go (sink).

    Either a device (``device`` is its index) or an external node with its own link to every
    device (``bandwidth_Bps[d]``, ``latency_s[d]``); an external node draws no power.
    """

    device: int | None = None
    bandwidth_Bps: tuple[float, ...] = ()
    latency_s: tuple[float, ...] = ()

    @property
    def external(self) -> bool:
        return self.device is None

    def link_time(self, d: int, nbytes: float) -> float:
        """Seconds to move ``nbytes`` between this external node and device ``d``."""
        return nbytes / self.bandwidth_Bps[d] + self.latency_s[d]


@dataclass(frozen=True)
class Network:
    bandwidth_Bps: tuple[tuple[float, ...], ...]  # [sender][receiver], bytes per second
    latency_s: tuple[tuple[float, ...], ...]  # [sender][receiver], seconds per message
    medium: str = "switched"
    source: Endpoint = Endpoint(device=0)
    sink: Endpoint = Endpoint(device=0)

    def transfer_time(self, sender: int, receiver: int, nbytes: float) -> float:
        """Seconds for one message of ``nbytes`` (0 for a device to itself or no bytes)."""
        if sender == receiver or nbytes <= 0:
            return 0.0
        return nbytes / self.bandwidth_Bps[sender][receiver] + self.latency_s[sender][receiver]
