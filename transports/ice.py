"""Which local addresses aiortc offers as ICE host candidates (``server.webrtc_ice_hosts``).

aioice gathers a host candidate on every interface *except* loopback, so a "loopback" test or
benchmark otherwise runs over the machine's LAN address. ``restrict_ice_hosts(["127.0.0.1"])``
makes this process offer exactly the given addresses (process-wide: aioice has no per-connection
option); every peer connection created afterwards gathers only those.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

LOOPBACK = ("127.0.0.1",)


def parse_ice_hosts(text: str) -> list[str]:
    """``"127.0.0.1, ::1"`` -> the addresses; a malformed one raises ``ValueError`` naming it."""
    hosts = [h.strip() for h in text.split(",") if h.strip()]
    for h in hosts:
        try:
            ipaddress.ip_address(h)
        except ValueError:
            raise ValueError(f"server.webrtc_ice_hosts: {h!r} is not an IP address") from None
    return hosts


def restrict_ice_hosts(hosts: Sequence[str]) -> None:
    """Offer only ``hosts`` as ICE host candidates from now on (empty: aioice's default again)."""
    import aioice.ice

    original = getattr(aioice.ice, "_cadence_original_hosts", None) or aioice.ice.get_host_addresses
    aioice.ice._cadence_original_hosts = original  # type: ignore[attr-defined]
    if not hosts:
        aioice.ice.get_host_addresses = original
        return
    chosen = list(hosts)

    def get_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        return [h for h in chosen if (use_ipv6 if ":" in h else use_ipv4)]

    aioice.ice.get_host_addresses = get_host_addresses
