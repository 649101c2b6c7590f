"""The sandbox API on HTTP: :class:`FaithfulKubernetes` behind aiohttp's low-level web server (its public API).

Each HTTP request is read whole, parsed (:func:`kvpilot.sandbox.semantics.parse_api_path`, the
bearer token, the JSON body) into a :class:`~kvpilot.sandbox.emulator.Request` and answered with
what the emulator returns: a JSON document (or a pod's log as ``text/plain``), or a watch as a
chunked stream of JSON lines, one event each, as the API server sends them. A watch ends when its
``timeoutSeconds`` pass or the client goes away. An exception inside the emulator is its bug: the
client gets a 500 ``Status`` and, in strict mode, the sandbox re-raises it when it stops.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import aiohttp.web

from kvpilot.sandbox import faults, semantics
from kvpilot.sandbox.emulator import FaithfulKubernetes, Reply, Request, Stream, request_verb
from kvpilot.sandbox.resources import Resource

#: Seconds the server waits, when it stops, for requests still being answered (its watches end at once).
SHUTDOWN_TIMEOUT = 2.0


def parse_request(raw: aiohttp.web.BaseRequest, body: bytes, request_id: int) -> Request:
    """A :class:`Request` from the HTTP request ``raw`` and its ``body``."""
    text = body.decode("utf-8", errors="replace")
    try:
        data = json.loads(text) if text else None
    except ValueError:
        data = None
    query = dict(raw.query)
    parsed = semantics.parse_api_path(raw.path)
    resource = (
        Resource(parsed.group, parsed.version or "", parsed.plural)
        if parsed.group is not None and parsed.plural
        else None
    )
    auth = raw.headers.get("Authorization", "")
    return Request(
        id=request_id,
        method=raw.method.upper(),
        path=raw.path,
        query=query,
        query_string=raw.query_string,
        headers=dict(raw.headers),
        data=data,
        token=auth[7:] if auth.startswith("Bearer ") else "",
        verb=request_verb(raw.method.upper(), parsed, query),
        resource=resource,
        namespace=parsed.namespace,
        name=parsed.name,
        subresource=parsed.subresource,
        transport=raw.transport,
    )


class ApiServer:
    """Serves ``emulator`` on ``http://host:<port>`` while entered (``async with``); ``port`` 0: a free one."""

    def __init__(self, emulator: FaithfulKubernetes, host: str = "127.0.0.1", port: int = 0) -> None:
        self.emulator = emulator
        self.host = host
        self.port = port
        self.url = ""
        self._runner: aiohttp.web.ServerRunner | None = None

    async def __aenter__(self) -> ApiServer:
        # handler_cancellation: a client that goes away ends its watch (aiohttp's default keeps the handler)
        server = aiohttp.web.Server(self._serve, handler_cancellation=True)
        self._runner = aiohttp.web.ServerRunner(server, shutdown_timeout=SHUTDOWN_TIMEOUT)
        await self._runner.setup()
        site = aiohttp.web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.emulator.end_watches()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _serve(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        body = await raw.read()
        request = parse_request(raw, body, len(self.emulator.requests))
        try:
            answer = await self.emulator.handle(request)
        except Exception as exc:  # noqa: BLE001 - the sandbox's own bug: answered, recorded, re-raised at exit
            return self._failed(exc)
        if isinstance(answer, Reply):
            return self._reply(answer)
        return await self._stream(raw, request, answer)

    def _failed(self, exc: Exception) -> aiohttp.web.Response:
        if self.emulator.strict:
            self.emulator.errors.append(exc)
        payload = faults.status_payload(500, "InternalError", f"the sandbox failed: {type(exc).__name__}: {exc}")
        return aiohttp.web.json_response(payload, status=500)

    @staticmethod
    def _reply(answer: Reply) -> aiohttp.web.Response:
        body = answer.payload if isinstance(answer.payload, bytes) else json.dumps(answer.payload).encode()
        return aiohttp.web.Response(
            status=answer.status, body=body, headers=answer.headers, content_type=answer.content_type
        )

    async def _stream(
        self, raw: aiohttp.web.BaseRequest, request: Request, answer: Stream
    ) -> aiohttp.web.StreamResponse:
        response = aiohttp.web.StreamResponse(status=200)
        response.content_type = "application/json"
        response.enable_chunked_encoding()
        await response.prepare(raw)  # the headers now: a quiet watch is still a watch
        try:
            async for event in answer.events:
                if answer.cut:  # an injected network cut: half a line, then no end of the chunked body
                    await response.write(faults.half_a_line(event))
                    if request.transport is not None:
                        request.transport.close()
                    return response
                await response.write(json.dumps(event).encode() + b"\n")
        except (ConnectionError, RuntimeError):  # the client went away (kopf or the test stopped)
            return response
        except Exception as exc:  # noqa: BLE001 - the sandbox's own bug, after the headers went out
            if self.emulator.strict:
                self.emulator.errors.append(exc)
            error = faults.status_payload(500, "InternalError", f"the sandbox failed: {type(exc).__name__}: {exc}")
            await response.write(json.dumps({"type": "ERROR", "object": error}).encode() + b"\n")
        finally:
            await _close(answer.events)
        with contextlib.suppress(ConnectionError, RuntimeError):
            await response.write_eof()
        return response


async def _close(events: Any) -> None:
    """Close a watch's event generator (its subscription ends); one still running (its task was
    cancelled while it awaited an event) ends on its own as the cancellation unwinds it.
    """
    close = getattr(events, "aclose", None)
    if close is not None:
        with contextlib.suppress(RuntimeError):
            await close()
