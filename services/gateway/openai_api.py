"""OpenAI request schemas, their validation, and OpenAI-style error bodies.

Requests are parsed from raw bytes by pydantic in strict mode with unknown keys
forbidden, so malformed JSON, wrong types, out-of-range values and unsupported
parameters all become an :class:`ApiError` (HTTP 400) whose ``param`` names the field.
``null`` for an optional field means "absent" (openai-python sends null for None). Every
integer field is range-checked here, so no value reaches the msgpack encoder that it
cannot hold (token counts and ids are int32, ``seed`` is int64).
"""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field, ValidationError

from common import wire
from services.gateway.messages import ChatMessage, ResponseFormat, Strict, Tool, ToolChoice

MAX_LOGPROBS = 20
MAX_STOPS = 16
MAX_STOP_IDS = 64
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]  # token counts and token ids
Seed = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]


class ApiError(Exception):
    """An error answered with ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 type: str = "invalid_request_error", code: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.type = status, message, param, type
        self.code, self.headers = code, headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class StreamOptions(Strict):
    include_usage: bool = False


class _Common(Strict):
    """Parameters shared by both routes (OpenAI names, plus vLLM's extensions)."""

    model: str | None = None
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, ge=-1, le=INT32_MAX)
    seed: Seed | None = None
    stop: Union[str, list[str], None] = None
    stop_token_ids: list[Count] = Field([], max_length=MAX_STOP_IDS)
    ignore_eos: bool = False
    min_tokens: Count = 0
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    repetition_penalty: float = Field(1.0, gt=0.0, le=2.0)
    speculation: bool = True  # treespec's extension: false decodes this request without a token tree
    n: int = Field(1, ge=1, le=INT32_MAX)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None

    def stop_strings(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return [s for s in stops if s]


class CompletionRequest(_Common):
    prompt: Union[str, list[int], list[str], list[list[int]]]
    max_tokens: int = Field(16, ge=1, le=INT32_MAX)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False
    best_of: int | None = Field(None, ge=1, le=INT32_MAX)
    suffix: str | None = None
    logit_bias: dict[str, float] | None = None


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1, le=INT32_MAX)
    max_completion_tokens: int | None = Field(None, ge=1, le=INT32_MAX)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    response_format: ResponseFormat | None = None
    logit_bias: dict[str, float] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool = True


def _unsupported(req: Strict) -> tuple[str, str] | None:
    """(param, message) for a parameter value this server does not implement."""
    checks = [
        ("n", getattr(req, "n", 1) != 1, "only n=1 is supported"),
        ("best_of", getattr(req, "best_of", None) not in (None, 1), "only best_of=1 is supported"),
        ("echo", getattr(req, "echo", False), "echo is not supported"),
        ("suffix", getattr(req, "suffix", None) is not None, "suffix is not supported"),
        ("logit_bias", bool(getattr(req, "logit_bias", None)), "logit_bias is not supported"),
        ("stop", len(req.stop_strings()) > MAX_STOPS, f"at most {MAX_STOPS} stop strings"),
        ("tool_choice", _choice_without_tools(req), "tool_choice needs a non-empty tools list"),
        ("tool_choice", _unknown_named_tool(req), "tool_choice names a function that is not in tools"),
    ]
    return next(((p, m) for p, bad, m in checks if bad), None)


def _choice_without_tools(req: Strict) -> bool:
    choice = getattr(req, "tool_choice", None)
    return choice not in (None, "none", "auto") and not getattr(req, "tools", None)


def _unknown_named_tool(req: Strict) -> bool:
    choice = getattr(req, "tool_choice", None)
    if choice is None or isinstance(choice, str):
        return False
    return choice.function.name not in {t.function.name for t in req.tools or []}


def check_model(requested: str | None, served: tuple[str, ...]) -> str:
    """The model name to answer with; ApiError(404, model_not_found) for a name not served."""
    if requested is None:
        return served[0]
    if requested not in served:
        raise ApiError(404, f"The model `{requested}` does not exist or you do not have access to it.",
                       param="model", code="model_not_found")
    return requested


def parse(model: type[Strict], raw: bytes) -> Strict:
    """Validate a request body; raises ApiError(400) naming the offending parameter."""
    try:
        req = model.model_validate_json(raw)
    except ValidationError as exc:
        raise _from_validation(exc) from None
    bad = _unsupported(req)
    if bad:
        raise ApiError(400, bad[1], param=bad[0])
    return req


def _from_validation(exc: ValidationError) -> ApiError:
    err = exc.errors()[0]
    if err["type"] == "json_invalid":
        return ApiError(400, f"request body is not valid JSON: {err['msg']}")
    if err["type"] == "model_type" or not err["loc"]:
        return ApiError(400, "request body must be a JSON object")
    param = str(err["loc"][0])
    if err["type"] == "extra_forbidden":
        return ApiError(400, f"unsupported parameter: {param}", param=param)
    where = ".".join(str(p) for p in err["loc"])
    return ApiError(400, f"invalid value for {where}: {err['msg']}", param=param)


def completion_prompt(req: CompletionRequest) -> str | list[int]:
    """The single prompt of a completion request, as text or token ids."""
    p = req.prompt
    if isinstance(p, list) and p and isinstance(p[0], (str, list)):
        if len(p) != 1:
            raise ApiError(400, "batched prompts are not supported; send one prompt", param="prompt")
        p = p[0]
    if not p:
        raise ApiError(400, "prompt must not be empty", param="prompt")
    return p


def check_prompt_ids(ids: list[int], vocab_size: int) -> None:
    if not ids:
        raise ApiError(400, "prompt must not be empty", param="prompt")
    if min(ids) < 0 or max(ids) >= vocab_size:
        raise ApiError(400, f"prompt token ids must be in 0..{vocab_size - 1}", param="prompt")


def sampling_params(req: CompletionRequest | ChatRequest, prompt_len: int, max_model_len: int,
                    end_ids: list[int]) -> wire.SamplingParams:
    """Map a validated request to wire.SamplingParams; 400 when it cannot fit the context."""
    room = max_model_len - prompt_len
    if room < 1:
        raise ApiError(400, f"prompt has {prompt_len} tokens; the context holds {max_model_len}",
                       param="messages" if isinstance(req, ChatRequest) else "prompt")
    max_tokens = _max_tokens(req, room)
    if max_tokens > room:
        raise ApiError(400, f"prompt ({prompt_len} tokens) + max_tokens ({max_tokens}) exceeds the "
                       f"context length {max_model_len}", param="max_tokens")
    stop_ids = list(req.stop_token_ids) + ([] if req.ignore_eos else end_ids)
    return wire.SamplingParams(
        max_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p, top_k=max(req.top_k, 0),
        seed=req.seed, stop_token_ids=sorted(set(stop_ids)), ignore_eos=req.ignore_eos,
        min_tokens=req.min_tokens, logprobs=_logprobs(req), presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty, repetition_penalty=req.repetition_penalty,
        speculate=req.speculation)


def _max_tokens(req: CompletionRequest | ChatRequest, room: int) -> int:
    if isinstance(req, CompletionRequest):
        return req.max_tokens
    return req.max_completion_tokens or req.max_tokens or room


def _logprobs(req: CompletionRequest | ChatRequest) -> int | None:
    if isinstance(req, CompletionRequest):
        return req.logprobs
    return (req.top_logprobs or 0) if req.logprobs else None


def include_usage(req: CompletionRequest | ChatRequest) -> bool:
    return bool(req.stream_options and req.stream_options.include_usage)
