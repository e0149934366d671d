"""Typed application state keys shared by the gateway's modules."""

from __future__ import annotations

from aiohttp import web

from common.config import Config
from common.tokenizer import Tokenizer
from services.gateway.auth import IpAllowlist, KeyStore
from services.gateway.backend import Backend
from services.gateway.metrics import Metrics
from services.gateway.ratelimit import RateLimiter

CONFIG = web.AppKey("config", Config)
BACKEND = web.AppKey("backend", Backend)
TOKENIZER = web.AppKey("tokenizer", Tokenizer)
METRICS = web.AppKey("metrics", Metrics)
KEYS = web.AppKey("keys", KeyStore)
ALLOWLIST = web.AppKey("allowlist", IpAllowlist)
LIMITER = web.AppKey("limiter", RateLimiter)
CLIENT_ID = web.RequestKey("client_id", str)  # the API key's name (rate-limit identity)
