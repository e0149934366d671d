"""The gateway's aiohttp application: routes, the request guard, health and metrics.

``make_app(config, backend)`` wires everything; the backend (the scheduler client) and
the tokenizer thread pool are started and closed by the app's cleanup context. Every
error leaves as an OpenAI-style JSON body: ``ApiError`` raised anywhere, aiohttp's own
HTTP errors (unknown route 404, wrong method 405, body too large 413) and unexpected
exceptions (500, logged).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import AsyncIterator

import structlog
from aiohttp import web

from common.config import Config
from common.tokenizer import Tokenizer, load_tokenizer
from services.gateway import handlers, state
from services.gateway.auth import IpAllowlist, KeyStore, authenticate
from services.gateway.backend import Backend
from services.gateway.metrics import CONTENT_TYPE, Metrics
from services.gateway.openai_api import ApiError
from services.gateway.peers import ClientResolver, HostCheck
from services.gateway.ratelimit import RateLimiter
from services.gateway.server import GUARD, track_requests
from services.probes import default_replica

log = structlog.get_logger(__name__)

OPEN_PATHS = ("/health", "/metrics")  # no API key needed when config.public_health
PROBE_PATHS = ("/livez", "/readyz")  # kubelet / compose probes: no key, no IP allowlist, say only ok
JSON_TYPE = "application/json"
CLIENT_CLOSED = 499  # nginx's code for a client that closed the connection before the response
UNMATCHED = "unmatched"  # the endpoint label of an unknown path or method
TOKENIZE_THREADS = 2
HTTP_ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 404: "invalid_request_error",
                    429: "rate_limit_error"}


@web.middleware
async def guard(request: web.Request, handler) -> web.StreamResponse:
    """Client address, allowlist (403), Host (403), API key (401), JSON body (415), rate
    limit (429, charged before the body is read); every error -> OpenAI error JSON. Every
    answer but the probes' is counted in ``http_requests_total`` (499: the client left first)."""
    if request.path in PROBE_PATHS:
        return await handler(request)
    try:
        response = await _guarded(request, handler)
    except asyncio.CancelledError:
        _count(request, CLIENT_CLOSED)
        raise
    _count(request, response.status)
    return response


async def _guarded(request: web.Request, handler) -> web.StreamResponse:
    try:
        _admit(request)
        return await handler(request)
    except ApiError as exc:
        return _error(request, exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        kind = HTTP_ERROR_TYPES.get(exc.status, "invalid_request_error" if exc.status < 500 else "server_error")
        return _error(request, ApiError(exc.status, exc.reason if exc.text is None else exc.text, type=kind,
                                        headers={k: v for k, v in exc.headers.items() if k == "Allow"}))
    except Exception:  # noqa: BLE001 - the last resort: a JSON 500, logged with its traceback
        log.exception("unhandled error", path=request.path)
        return _error(request, ApiError(500, "internal server error", type="server_error"))


def _count(request: web.Request, status: int) -> None:
    """One ``http_requests_total`` sample, labelled by route (never the raw path: bounded labels)."""
    resource = request.match_info.route.resource
    endpoint = resource.canonical if resource is not None else UNMATCHED
    request.app[state.METRICS].http_requests.labels(endpoint, str(status)).inc()


def _admit(request: web.Request) -> None:
    app, cfg = request.app, request.app[state.CONFIG]
    client = app[state.RESOLVER].client(request.remote, request.headers.get("X-Forwarded-For"))
    request[state.CLIENT_ADDR] = client or "unknown"
    app[state.ALLOWLIST].check(client)
    open_path = request.path in OPEN_PATHS and cfg.public_health
    if not open_path:
        app[state.HOSTS].check(request.host)
        request[state.CLIENT_ID] = authenticate(app[state.KEYS], request.headers.get("Authorization"))
    if request.method == "POST":
        if request.content_type != JSON_TYPE:
            raise ApiError(415, f"Content-Type must be {JSON_TYPE}, got {request.content_type!r}")
        who = request.get(state.CLIENT_ID) or request[state.CLIENT_ADDR]
        request[state.RATE_HEADERS] = app[state.LIMITER].admit_request(who)


LOGGED_MESSAGE_CHARS = 200  # a rejection's message as logged (the client gets it whole)


def _error(request: web.Request, exc: ApiError) -> web.Response:
    """The error as OpenAI JSON, logged (``request rejected``) as an access log would."""
    log.info("request rejected", status=exc.status, error_type=exc.type, code=exc.code, param=exc.param,
             method=request.method, path=request.path, client=request.get(state.CLIENT_ADDR),
             message=exc.message[:LOGGED_MESSAGE_CHARS])
    return web.json_response(exc.body(), status=exc.status, headers=exc.headers)


async def health(request: web.Request) -> web.Response:
    """200 once the scheduler reports ready, else 503 + Retry-After; per-service status."""
    backend = request.app[state.BACKEND]
    stats = backend.stats if backend.connected else None
    services = {"gateway": "up", "scheduler": "up" if backend.connected else "down"}
    for w in stats.workers if stats else []:
        role = w.role.value if w.role is not None else "worker"
        services[f"{role}/{w.replica}"] = "ready" if w.ready else "loading"
    body = {"status": "ready" if backend.ready else "loading", "services": services}
    if backend.ready:
        return web.json_response(body)
    return web.json_response(body, status=503, headers={"Retry-After": str(handlers.RETRY_AFTER_S)})


async def livez(request: web.Request) -> web.Response:
    """Liveness: 200 whenever the event loop answers (workers or scheduler down or not)."""
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    """Readiness: 200 when requests can be served (scheduler connected and ready: a
    warmed-up verifier, and a draft worker when speculating), else 503. ``/health`` is the
    same answer with per-service detail."""
    if request.app[state.BACKEND].ready:
        return web.Response(text="ok\n")
    return web.Response(text="not ready\n", status=503, headers={"Retry-After": str(handlers.RETRY_AFTER_S)})


async def metrics(request: web.Request) -> web.Response:
    return web.Response(body=request.app[state.METRICS].render(), headers={"Content-Type": CONTENT_TYPE})


def _backend_ctx(backend: Backend):
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        await backend.start()
        yield
        await backend.close()
        app[state.POOL].shutdown(wait=False, cancel_futures=True)
    return ctx


def make_app(config: Config, backend: Backend, tokenizer: Tokenizer | None = None,
             replica: str | None = None) -> web.Application:
    """The gateway application. ``tokenizer`` defaults to the main model's (torch-free)."""
    app = web.Application(middlewares=[track_requests, guard], client_max_size=config.max_request_bytes)
    app[state.CONFIG] = config
    app[state.BACKEND] = backend
    app[state.TOKENIZER] = tokenizer or load_tokenizer(config.main_model_path)
    app[state.METRICS] = Metrics(default_replica(replica), lambda: backend.stats, lambda: backend.connected,
                                 lambda: app.get(GUARD))
    app[state.KEYS] = KeyStore(config.api_keys_file)
    app[state.ALLOWLIST] = IpAllowlist(config.ip_allowlist)
    app[state.RESOLVER] = ClientResolver.from_config(config.trusted_proxies)
    app[state.HOSTS] = HostCheck.from_config(bool(config.api_keys_file), config.allowed_hosts)
    app[state.LIMITER] = RateLimiter(config.rate_limit_rpm, config.rate_limit_tpm)
    app[state.POOL] = ThreadPoolExecutor(TOKENIZE_THREADS, thread_name_prefix="tokenize")
    app.router.add_post("/v1/completions", handlers.completions)
    app.router.add_post("/v1/chat/completions", handlers.chat_completions)
    app.router.add_get("/v1/models", handlers.models)
    app.router.add_get("/v1/models/{model:.+}", handlers.model)
    app.router.add_get("/health", health)
    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.cleanup_ctx.append(_backend_ctx(backend))
    return app
