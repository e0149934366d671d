"""Typed application state keys shared by the gateway's modules."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from common.config import Config
from common.tokenizer import Tokenizer
from services.gateway.auth import IpAllowlist, KeyStore
from services.gateway.backend import Backend
from services.gateway.metrics import Metrics
from services.gateway.peers import ClientResolver, HostCheck
from services.gateway.ratelimit import RateLimiter

CONFIG = web.AppKey("config", Config)
BACKEND = web.AppKey("backend", Backend)
TOKENIZER = web.AppKey("tokenizer", Tokenizer)
METRICS = web.AppKey("metrics", Metrics)
KEYS = web.AppKey("keys", KeyStore)
ALLOWLIST = web.AppKey("allowlist", IpAllowlist)
RESOLVER = web.AppKey("resolver", ClientResolver)
HOSTS = web.AppKey("hosts", HostCheck)
LIMITER = web.AppKey("limiter", RateLimiter)
POOL = web.AppKey("pool", ThreadPoolExecutor)  # tokenizing and chat templating, off the event loop
CLIENT_ID = web.RequestKey("client_id", str)  # the API key's name (rate-limit identity)
CLIENT_ADDR = web.RequestKey("client_addr", str)  # the client's address (behind trusted proxies)
RATE_HEADERS = web.RequestKey("rate_headers", dict)  # x-ratelimit-* from the request charge
