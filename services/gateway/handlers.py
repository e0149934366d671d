"""The OpenAI routes: /v1/completions, /v1/chat/completions, /v1/models[/{id}].

Each generation handler reads the body (size cap, read timeout), validates it, checks
the model name and the prompt's size, tokenizes in the app's thread pool (never on the
event loop), checks readiness and the token rate limit, then either streams SSE or
collects the whole answer. Backend refusals become 429/503 with Retry-After; a backend
failure becomes 503 (before output) or an SSE error event.
"""

from __future__ import annotations

import asyncio
import math
import uuid

from aiohttp import web

from common import wire
from services.gateway import state
from services.gateway.backend import BackendRejected, BackendUnavailable
from services.gateway.chat import ChatPlan, plan_chat
from services.gateway.generation import Generation
from services.gateway.openai_api import (ApiError, ChatRequest, CompletionRequest, check_model, check_prompt_ids,
                                         completion_prompt, include_usage, parse, sampling_params)
from services.gateway.responses import Formatter, usage
from services.gateway.streaming import SseWriter
from services.gateway.token_check import check_token_fields

RETRY_AFTER_S = 1
MAX_CHARS_PER_TOKEN = 32  # a prompt longer than context x this cannot fit: refused before tokenizing


def not_ready() -> ApiError:
    return ApiError(503, "the model is loading; retry shortly", type="server_error",
                    code="service_unavailable", headers={"Retry-After": str(RETRY_AFTER_S)})


async def read_body(request: web.Request) -> bytes:
    """The request body: 413 past ``max_request_bytes`` (before reading), 408 when too slow."""
    cfg = request.app[state.CONFIG]
    if (request.content_length or 0) > cfg.max_request_bytes:
        raise ApiError(413, f"request body is larger than {cfg.max_request_bytes} bytes")
    try:
        return await asyncio.wait_for(request.read(), cfg.read_timeout_s)
    except asyncio.TimeoutError:
        raise ApiError(408, f"request body not received within {cfg.read_timeout_s} s") from None


async def offload(request: web.Request, fn, *args):
    """Run CPU-bound ``fn(*args)`` (tokenizing, templating) in the app's thread pool."""
    return await asyncio.get_running_loop().run_in_executor(request.app[state.POOL], fn, *args)


def check_prompt_chars(chars: int, max_model_len: int, param: str) -> None:
    """400 for a prompt too long to fit the context whatever its tokenization."""
    if chars > max_model_len * MAX_CHARS_PER_TOKEN:
        raise ApiError(400, f"prompt of {chars} characters cannot fit the context of {max_model_len} "
                       "tokens", param=param)


async def completions(request: web.Request) -> web.StreamResponse:
    req = parse(CompletionRequest, await read_body(request))
    cfg, tok = request.app[state.CONFIG], request.app[state.TOKENIZER]
    model = check_model(req.model, served_names(cfg))
    prompt = completion_prompt(req)
    if isinstance(prompt, str):
        check_prompt_chars(len(prompt), cfg.max_model_len, "prompt")
        ids = await offload(request, tok.encode, prompt)
    else:
        ids = list(prompt)
    return await _serve(request, req, ids, Formatter(_request_id(False), model, False, tok), ChatPlan())


async def chat_completions(request: web.Request) -> web.StreamResponse:
    req = parse(ChatRequest, await read_body(request))
    cfg, tok = request.app[state.CONFIG], request.app[state.TOKENIZER]
    model = check_model(req.model, served_names(cfg))
    plan = plan_chat(req, tok)
    check_prompt_chars(plan.prompt_chars, cfg.max_model_len, "messages")
    ids = await offload(request, plan.tokenize, tok)
    return await _serve(request, req, ids, Formatter(_request_id(True), model, True, tok), plan)


def served_names(cfg) -> tuple[str, ...]:
    return (cfg.served_model_name, *cfg.served_model_aliases)


def _card(cfg, name: str) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "treespec", "max_model_len": cfg.max_model_len}


async def models(request: web.Request) -> web.Response:
    cfg = request.app[state.CONFIG]
    return web.json_response({"object": "list", "data": [_card(cfg, n) for n in served_names(cfg)]})


async def model(request: web.Request) -> web.Response:
    """One model's card; 404 model_not_found for a name this gateway does not serve."""
    cfg = request.app[state.CONFIG]
    return web.json_response(_card(cfg, check_model(request.match_info["model"], served_names(cfg))))


def _request_id(chat: bool) -> str:
    return ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex


async def _serve(request: web.Request, req, ids: list[int], fmt: Formatter, plan: ChatPlan) -> web.StreamResponse:
    app, cfg = request.app, request.app[state.CONFIG]
    tok = app[state.TOKENIZER]
    check_prompt_ids(ids, tok.vocab_size)
    check_token_fields(req, tok.vocab_size)
    params = plan.constrain(sampling_params(req, len(ids), cfg.max_model_len, tok.end_token_ids()))
    _check_encodable(params)
    if not app[state.BACKEND].ready:
        raise not_ready()
    who = request.get(state.CLIENT_ID) or request[state.CLIENT_ADDR]
    headers = {**request.get(state.RATE_HEADERS, {}), **app[state.LIMITER].admit(who, len(ids) + params.max_tokens)}
    gen = Generation(app[state.BACKEND], tok, app[state.METRICS], fmt.request_id, ids, params, req.stop_strings())
    if req.stream:
        return await _stream(request, gen, fmt, plan, include_usage(req), headers)
    return await _collect(gen, fmt, plan, headers)


def _check_encodable(params: wire.SamplingParams) -> None:
    """Defence in depth behind the schema's ranges: a value msgpack cannot hold is a 400."""
    try:
        wire.encode(wire.Submit(request_id="check", prompt=[], params=params))
    except (OverflowError, ValueError) as exc:
        raise ApiError(400, f"a parameter is out of range: {exc}") from None


def _refused(exc: BackendRejected) -> ApiError:
    """Scheduler refusal -> 429 (queue full) / 503 (not ready) / 400, never 500."""
    status = exc.status if exc.status in (400, 429, 503) else 503
    kind = {400: "invalid_request_error", 429: "rate_limit_error"}.get(status, "server_error")
    return ApiError(status, exc.reason, type=kind, code="overloaded" if status != 400 else None,
                    headers={"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))})


def _unavailable(exc: BackendUnavailable) -> ApiError:
    return ApiError(503, f"backend failure: {exc}", type="server_error", code="backend_error",
                    headers={"Retry-After": str(RETRY_AFTER_S)})


async def _collect(gen: Generation, fmt: Formatter, plan: ChatPlan, headers: dict[str, str]) -> web.Response:
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
    content, calls = plan.parse_output("".join(text))
    body = fmt.body(content, fmt.merge_logprobs(logprobs), "tool_calls" if calls else finish,
                    usage(gen.prompt_tokens, gen.completion_tokens), calls)
    return web.json_response(body, headers=headers)


async def _stream(request: web.Request, gen: Generation, fmt: Formatter, plan: ChatPlan, with_usage: bool,
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
        await _relay(sse, fmt, plan, first, pieces)
    except BackendUnavailable as exc:
        await sse.fail(f"backend failure: {exc}")
        return sse.response
    finally:
        await pieces.aclose()
    if with_usage:
        await sse.send(fmt.usage_chunk(usage(gen.prompt_tokens, gen.completion_tokens)))
    await sse.done()
    return sse.response


async def _relay(sse: SseWriter, fmt: Formatter, plan: ChatPlan, first, pieces) -> None:
    piece, is_first = first, True
    calls = plan.stream_parser()
    while True:
        lp = fmt.logprobs(piece.tokens, piece.logprobs)
        text, tool_deltas = calls.push(piece.text, final=piece.finish is not None)
        finish = "tool_calls" if piece.finish is not None and calls.called else piece.finish
        if text or lp or finish or is_first or tool_deltas:
            await sse.send(fmt.chunk(text, lp, finish, first=is_first and fmt.chat, tool_calls=tool_deltas))
            is_first = False
        if piece.finish is not None:
            return
        piece = await anext(pieces)
