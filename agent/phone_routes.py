"""Cadence server extension: phone callers on ``GET /phone/ws`` (Twilio Media Streams protocol).

The runtime registers the phone transport's routes (``transports.phone`` never imports the
runtime). ``agent.server_factory`` imports this module and calls ``install(server)``; the route hook then
adds the phone routes when the app is built, behind the server's admission gate. Options come
from a ``[phone]`` config section when the config has one (same field names as ``PhoneOptions``),
then from ``$CADENCE_PHONE_OPTIONS`` (a JSON object of the same fields), e.g.
``CADENCE_PHONE_OPTIONS='{"barge_in_start_ms": 0}' cadence serve``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

from transports.phone.barge_in import BargeInDetector
from transports.phone.endpoint import CallRecord, PhoneEndpoint
from transports.phone.options import PhoneOptions
from transports.phone.transport import PhoneTransport

if TYPE_CHECKING:
    from agent.serve import CadenceServer

PHONE_ENDPOINT = web.AppKey("phone_endpoint", PhoneEndpoint)


def options_from_config(config: Any, environ: Mapping[str, str] | None = None) -> PhoneOptions:
    """``PhoneOptions`` from the config's ``[phone]`` section, then ``$CADENCE_PHONE_OPTIONS``."""
    fields = {f.name: f for f in dataclasses.fields(PhoneOptions)}
    section = getattr(config, "phone", None)
    values: dict[str, Any] = {}
    if section is not None:
        values = dataclasses.asdict(section) if dataclasses.is_dataclass(section) else dict(section)
    raw = (os.environ if environ is None else environ).get("CADENCE_PHONE_OPTIONS", "")
    if raw:
        try:
            extra = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"$CADENCE_PHONE_OPTIONS is not JSON: {exc}") from None
        unknown = set(extra) - set(fields) if isinstance(extra, dict) else {"(not an object)"}
        if unknown:
            raise ValueError(f"$CADENCE_PHONE_OPTIONS: unknown keys {sorted(unknown)} (known: {sorted(fields)})")
        values.update(extra)
    return PhoneOptions(**{k: v for k, v in values.items() if k in fields})


def make_endpoint(server: CadenceServer, options: PhoneOptions) -> PhoneEndpoint:
    from agent.turn_observer import TurnObserver

    config = server.config

    async def run_call(transport: PhoneTransport, session_id: str, observers: Sequence[Any]) -> None:
        if server.engines is None:
            raise RuntimeError("the engines are not loaded")
        await server.run_caller(transport, session_id, observers=tuple(observers), audio_out_sample_rate=8000)

    def barge_in() -> BargeInDetector | None:
        if options.barge_in_start_ms <= 0:
            return None
        return BargeInDetector(options.barge_in_start_ms, options.barge_in_min_level_dbfs, options.barge_in_snr_db)

    def observers(record: CallRecord) -> list[Any]:
        return [TurnObserver(on_turn=record.add_turn)]

    return PhoneEndpoint(run_call, gate=server.gate, in_sample_rate=config.audio.in_sample_rate,
                         options=options, barge_in_factory=barge_in, observer_factory=observers,
                         api_key=config.server.api_key)


def install(server: CadenceServer, options: PhoneOptions | None = None) -> None:
    """Add the phone routes to ``server`` (options: given, else the config's ``[phone]``, else defaults)."""
    options = options or options_from_config(server.config)

    def hook(app: web.Application, srv: CadenceServer) -> None:
        srv.self_authenticated.update({options.path, "/phone/twiml"})  # signature / token checked there
        endpoint = make_endpoint(srv, options)
        endpoint.add_routes(app)
        app[PHONE_ENDPOINT] = endpoint

    server.route_hooks.append(hook)
