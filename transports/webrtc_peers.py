"""A browser peer's later requests reach the worker that holds it, whichever worker they land on.

Under ``cadence serve --workers N`` a client's offer makes its peer connection in one worker, but its trickled
ICE candidates (``PATCH /api/offer``) and renegotiations (``POST /api/offer`` with its ``pc_id``) may come over a
new connection, which the parent (or the kernel) hands to any worker: there the peer is unknown (404) and the
candidates are lost. Each worker therefore names its peers with its own tag (``w3-SmallWebRTCConnection#0-...``),
and a worker asked about another worker's peer passes the request on to that worker's loopback probe, which
answers it as if it had come there first.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import ClientError, ClientSession, ClientTimeout, web
from loguru import logger

FORWARD_TIMEOUT_S = 10.0
PEERS_ENV = "CADENCE_WORKER_PEERS"  # a worker's tag and every worker's probe URL (``PeerRouter.to_json``)


class PeerRouter:
    """``tag``: this worker's; ``peers``: every worker's tag -> its loopback base URL (``http://127.0.0.1:PORT``)."""

    def __init__(self, tag: str, peers: dict[str, str]):
        if not tag or "-" in tag:
            raise ValueError(f"a worker's tag is a non-empty word without '-', not {tag!r}")
        self.tag = tag
        self.peers = peers
        self._http: ClientSession | None = None

    @classmethod
    def from_json(cls, text: str) -> PeerRouter:
        data = json.loads(text)
        return cls(data["tag"], dict(data["peers"]))

    def to_json(self) -> str:
        return json.dumps({"tag": self.tag, "peers": self.peers})

    def name(self, pc_id: str) -> str:
        """``pc_id`` as this worker's peer."""
        return f"{self.tag}-{pc_id}"

    def owner(self, pc_id: str) -> str | None:
        """The base URL of the other worker that holds ``pc_id``; None if it is this worker's or nobody's."""
        tag = pc_id.partition("-")[0]
        return None if tag == self.tag else self.peers.get(tag)

    async def forward(self, method: str, base_url: str, body: dict[str, Any]) -> web.Response:
        """Send the request on to the worker at ``base_url``; its answer, or a 502 if it cannot be reached."""
        if self._http is None:
            self._http = ClientSession(timeout=ClientTimeout(total=FORWARD_TIMEOUT_S))
        try:
            async with self._http.request(method, f"{base_url}/api/offer", json=body) as answer:
                return web.Response(body=await answer.read(), status=answer.status,
                                    content_type=answer.content_type)
        except (ClientError, TimeoutError) as exc:
            logger.warning(f"could not pass a {method} for peer {body.get('pc_id')} on to {base_url}: {exc!r}")
            return web.json_response({"error": "the worker holding this peer connection did not answer"},
                                     status=502)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None
