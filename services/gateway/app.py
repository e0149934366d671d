"""The gateway's aiohttp application: routes, auth middleware, health and metrics.

``make_app(config, backend)`` wires everything; the backend (the scheduler client) is
started and closed by the app's cleanup context. ``ApiError`` raised anywhere becomes an
OpenAI-style JSON error with its status and headers.
"""

from __future__ import annotations

from typing import AsyncIterator

from aiohttp import web

from common.config import Config
from common.tokenizer import Tokenizer, load_tokenizer
from services.gateway import handlers, state
from services.gateway.auth import IpAllowlist, KeyStore, authenticate
from services.gateway.backend import Backend
from services.gateway.metrics import CONTENT_TYPE, Metrics
from services.gateway.openai_api import ApiError
from services.gateway.ratelimit import RateLimiter
from services.probes import default_replica

OPEN_PATHS = ("/health", "/metrics")  # no API key needed when config.public_health
PROBE_PATHS = ("/livez", "/readyz")  # kubelet / compose probes: no key, no IP allowlist, say only ok
MAX_BODY_BYTES = 8 * 1024 * 1024


@web.middleware
async def guard(request: web.Request, handler) -> web.StreamResponse:
    """IP allowlist (403), API key (401), and ApiError -> OpenAI error response."""
    app = request.app
    if request.path in PROBE_PATHS:
        return await handler(request)
    try:
        app[state.ALLOWLIST].check(request.remote)
        if not (request.path in OPEN_PATHS and app[state.CONFIG].public_health):
            request[state.CLIENT_ID] = authenticate(app[state.KEYS], request.headers.get("Authorization"))
        return await handler(request)
    except ApiError as exc:
        app[state.METRICS].requests.labels(str(exc.status)).inc()
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
    return ctx


def make_app(config: Config, backend: Backend, tokenizer: Tokenizer | None = None,
             replica: str | None = None) -> web.Application:
    """The gateway application. ``tokenizer`` defaults to the main model's (torch-free)."""
    app = web.Application(middlewares=[guard], client_max_size=MAX_BODY_BYTES)
    app[state.CONFIG] = config
    app[state.BACKEND] = backend
    app[state.TOKENIZER] = tokenizer or load_tokenizer(config.main_model_path)
    app[state.METRICS] = Metrics(default_replica(replica), lambda: backend.stats, lambda: backend.connected)
    app[state.KEYS] = KeyStore(config.api_keys_file)
    app[state.ALLOWLIST] = IpAllowlist(config.ip_allowlist)
    app[state.LIMITER] = RateLimiter(config.rate_limit_rpm, config.rate_limit_tpm)
    app.router.add_post("/v1/completions", handlers.completions)
    app.router.add_post("/v1/chat/completions", handlers.chat_completions)
    app.router.add_get("/v1/models", handlers.models)
    app.router.add_get("/health", health)
    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.cleanup_ctx.append(_backend_ctx(backend))
    return app
