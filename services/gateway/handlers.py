"""The OpenAI routes: /v1/completions, /v1/chat/completions, /v1/models.

Each generation handler validates, tokenizes, checks readiness and rate limits, then
either streams SSE or collects the whole answer. Backend refusals become 429/503 with
Retry-After; a backend failure becomes 503 (before output) or an SSE error event.
"""

from __future__ import annotations

import math
import uuid

from aiohttp import web

from services.gateway import state
from services.gateway.backend import BackendRejected, BackendUnavailable
from services.gateway.generation import Generation
from services.gateway.openai_api import (ApiError, ChatRequest, CompletionRequest, check_prompt_ids,
                                         completion_prompt, include_usage, parse, sampling_params)
from services.gateway.responses import Formatter, usage
from services.gateway.streaming import SseWriter
from services.gateway.token_check import check_token_fields

RETRY_AFTER_S = 1


def not_ready() -> ApiError:
    return ApiError(503, "the model is loading; retry shortly", type="server_error",
                    code="service_unavailable", headers={"Retry-After": str(RETRY_AFTER_S)})


async def completions(request: web.Request) -> web.StreamResponse:
    req = parse(CompletionRequest, await request.read())
    prompt = completion_prompt(req)
    tok = request.app[state.TOKENIZER]
    ids = tok.encode(prompt) if isinstance(prompt, str) else list(prompt)
    return await _serve(request, req, ids, chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    req = parse(ChatRequest, await request.read())
    tok = request.app[state.TOKENIZER]
    try:
        text = tok.apply_chat_template([{"role": m.role, "content": m.text()} for m in req.messages])
    except ValueError as exc:
        raise ApiError(400, str(exc), param="messages") from None
    return await _serve(request, req, tok.encode(text, add_special_tokens=False), chat=True)


async def models(request: web.Request) -> web.Response:
    cfg = request.app[state.CONFIG]
    card = {"id": cfg.served_model_name, "object": "model", "created": 0, "owned_by": "treespec",
            "max_model_len": cfg.max_model_len}
    return web.json_response({"object": "list", "data": [card]})


async def _serve(request: web.Request, req, ids: list[int], chat: bool) -> web.StreamResponse:
    app, cfg = request.app, request.app[state.CONFIG]
    tok = app[state.TOKENIZER]
    check_prompt_ids(ids, tok.vocab_size)
    check_token_fields(req, tok.vocab_size)
    params = sampling_params(req, len(ids), cfg.max_model_len, tok.end_token_ids())
    if not app[state.BACKEND].ready:
        raise not_ready()
    client = request.get(state.CLIENT_ID) or request.remote or "anonymous"
    headers = app[state.LIMITER].admit(client, len(ids) + params.max_tokens)
    request_id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    gen = Generation(app[state.BACKEND], tok, app[state.METRICS], request_id, ids, params, req.stop_strings())
    fmt = Formatter(request_id, cfg.served_model_name, chat, tok)
    if req.stream:
        return await _stream(request, gen, fmt, include_usage(req), headers)
    return await _collect(gen, fmt, headers)


def _refused(exc: BackendRejected) -> ApiError:
    """Scheduler refusal -> 429 (queue full) / 503 (not ready) / 400, never 500."""
    status = exc.status if exc.status in (400, 429, 503) else 503
    kind = {400: "invalid_request_error", 429: "rate_limit_error"}.get(status, "server_error")
    return ApiError(status, exc.reason, type=kind, code="overloaded" if status != 400 else None,
                    headers={"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))})


def _unavailable(exc: BackendUnavailable) -> ApiError:
    return ApiError(503, f"backend failure: {exc}", type="server_error", code="backend_error",
                    headers={"Retry-After": str(RETRY_AFTER_S)})


async def _collect(gen: Generation, fmt: Formatter, headers: dict[str, str]) -> web.Response:
    text, logprobs, finish = [], [], None
    try:
        async for piece in gen.pieces():
            text.append(piece.text)
            lp = fmt.logprobs(piece.tokens, piece.logprobs)
            logprobs += [lp] if lp else []
            finish = piece.finish
    except BackendRejected as exc:
        raise _refused(exc) from None
    except BackendUnavailable as exc:
        raise _unavailable(exc) from None
    body = fmt.body("".join(text), fmt.merge_logprobs(logprobs), finish,
                    usage(gen.prompt_tokens, gen.completion_tokens))
    return web.json_response(body, headers=headers)


async def _stream(request: web.Request, gen: Generation, fmt: Formatter, with_usage: bool,
                  headers: dict[str, str]) -> web.StreamResponse:
    pieces = gen.pieces()
    try:
        first = await anext(pieces)  # refusals still get a plain HTTP status
    except BackendRejected as exc:
        raise _refused(exc) from None
    except BackendUnavailable as exc:
        raise _unavailable(exc) from None
    sse = SseWriter(request, headers)
    await sse.open()
    try:
        await _relay(sse, fmt, first, pieces)
    except BackendUnavailable as exc:
        await sse.fail(f"backend failure: {exc}")
        return sse.response
    finally:
        await pieces.aclose()
    if with_usage:
        await sse.send(fmt.usage_chunk(usage(gen.prompt_tokens, gen.completion_tokens)))
    await sse.done()
    return sse.response


async def _relay(sse: SseWriter, fmt: Formatter, first, pieces) -> None:
    piece, is_first = first, True
    while True:
        lp = fmt.logprobs(piece.tokens, piece.logprobs)
        if piece.text or lp or piece.finish or is_first:
            await sse.send(fmt.chunk(piece.text, lp, piece.finish, first=is_first and fmt.chat))
            is_first = False
        if piece.finish is not None:
            return
        piece = await anext(pieces)
