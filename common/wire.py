"""Every message that crosses a process boundary, and its msgpack encoding.

A frame on the wire is one msgpack map (encoded and validated by msgspec; any msgpack
library can read it) tagged with ``"type"`` = the message type, plus the protocol version
``"v"``. Arrays travel as ``Array`` (dtype, shape, raw bytes): never pickle. Decoding
checks types, the frame size, every array's dtype/shape/byte count and the version, and
raises :class:`WireError`; callers log and drop such frames.
"""

from __future__ import annotations

from enum import Enum
from typing import Union

import msgspec
import numpy as np

PROTOCOL_VERSION = 1
MAX_FRAME_BYTES = 64 * 1024 * 1024  # one message
MAX_ARRAY_ELEMENTS = 4 * 1024 * 1024
ALLOWED_DTYPES = ("int32", "int64", "float32", "float16", "bool")


class WireError(ValueError):
    """A frame that is not a valid treespec message (malformed, oversized, wrong version)."""


class FinishReason(str, Enum):
    STOP = "stop"  # EOS, a stop token id or a stop string
    LENGTH = "length"  # max_tokens or the context limit
    ABORT = "abort"  # client went away / aborted
    ERROR = "error"  # a backend failure ended the request


class Role(str, Enum):
    GATEWAY = "gateway"
    DRAFT = "draft"
    VERIFIER = "verifier"


class Array(msgspec.Struct, frozen=True, kw_only=True):
    """A numpy array as (dtype, shape, C-order bytes)."""

    dtype: str
    shape: list[int]
    data: bytes

    @classmethod
    def of(cls, a: np.ndarray) -> "Array":
        a = np.ascontiguousarray(a)
        return cls(dtype=str(a.dtype), shape=list(a.shape), data=a.tobytes())

    def numpy(self) -> np.ndarray:
        """Decode; raises WireError on a bad dtype, shape or byte count."""
        if self.dtype not in ALLOWED_DTYPES:
            raise WireError(f"array dtype {self.dtype!r} not allowed")
        count = int(np.prod(self.shape)) if self.shape else 1
        if any(d < 0 for d in self.shape) or count > MAX_ARRAY_ELEMENTS:
            raise WireError(f"array shape {self.shape} invalid or too large")
        dt = np.dtype(self.dtype)
        if len(self.data) != count * dt.itemsize:
            raise WireError(f"array of shape {self.shape} needs {count * dt.itemsize} bytes, got {len(self.data)}")
        return np.frombuffer(self.data, dtype=dt).reshape(self.shape)


class SamplingParams(msgspec.Struct, frozen=True, kw_only=True):
    """Per-request decoding parameters (OpenAI names). temperature 0 = greedy."""

    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    seed: int | None = None
    stop_token_ids: list[int] = []
    ignore_eos: bool = False
    min_tokens: int = 0
    logprobs: int | None = None  # None = off; k = also return top-k alternatives
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    grammar: str | None = None  # an llguidance grammar (JSON schema / Lark) the output must match
    speculate: bool = True  # False: never draft for this request (one main-model token per step)


class Tree(msgspec.Struct, frozen=True, kw_only=True):
    """A TokenTree on the wire: tokens [n] int64, parents [n] int32, scores [n] float32."""

    tokens: Array
    parents: Array
    scores: Array


# ---- gateway <-> scheduler ---------------------------------------------------------------
class Submit(msgspec.Struct, tag="submit", frozen=True, kw_only=True):
    request_id: str
    prompt: list[int]
    params: SamplingParams
    v: int = PROTOCOL_VERSION


class Abort(msgspec.Struct, tag="abort", frozen=True, kw_only=True):
    request_id: str
    v: int = PROTOCOL_VERSION


class TokenLogprob(msgspec.Struct, frozen=True, kw_only=True):
    """Main-model log-probability of a returned token and optional top alternatives."""

    logprob: float
    top: list[tuple[int, float]] = []


class TokenDelta(msgspec.Struct, tag="delta", frozen=True, kw_only=True):
    """New output tokens of a request; ``finish`` set on its last delta only."""

    request_id: str
    tokens: list[int]
    logprobs: list[TokenLogprob] | None = None
    finish: FinishReason | None = None
    error: str | None = None
    prompt_tokens: int = 0
    queue_ms: float = 0.0  # ms the request waited in the scheduler's queue before admission (on every delta)
    v: int = PROTOCOL_VERSION


class Rejected(msgspec.Struct, tag="rejected", frozen=True, kw_only=True):
    """Admission refused: ``status`` 429 (queue full) / 503 (not ready) / 400 (bad request)."""

    request_id: str
    status: int
    reason: str
    retry_after_s: float = 1.0
    v: int = PROTOCOL_VERSION


# ---- scheduler <-> workers ---------------------------------------------------------------
class DraftSeq(msgspec.Struct, frozen=True, kw_only=True):
    """One sequence in a draft step: append ``new_tokens`` at ``prefix_len``, draft a tree."""

    seq_id: str
    prefix_len: int  # tokens the worker must already hold (else it answers `lost`)
    new_tokens: list[int]
    tree_size: int
    max_depth: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    grammar: str | None = None  # SamplingParams.grammar: propose only tokens it allows
    output: list[int] = []  # with a grammar: the output tokens so far (incl. a guessed path)


class DraftStep(msgspec.Struct, tag="draft_step", frozen=True, kw_only=True):
    """``guess``: a look-ahead step (draft/verify overlap): each sequence's ``new_tokens``
    end with a path the scheduler *assumes* the verifier will accept; the worker drafts as
    usual and echoes the flag (it needs no other special handling)."""

    round: int
    seqs: list[DraftSeq]
    guess: bool = False
    v: int = PROTOCOL_VERSION


class DraftResult(msgspec.Struct, tag="draft_result", frozen=True, kw_only=True):
    round: int
    trees: dict[str, Tree]
    lost: list[str] = []  # sequences whose KV this worker does not hold (re-prefill them)
    draft_ms: float = 0.0
    guess: bool = False  # echoes DraftStep.guess
    v: int = PROTOCOL_VERSION


class VerifySeq(msgspec.Struct, frozen=True, kw_only=True):
    """One sequence in a verify step: append ``new_tokens`` at ``prefix_len``, score ``tree``."""

    seq_id: str
    prefix_len: int
    new_tokens: list[int]
    tree: Tree
    params: SamplingParams
    history: list[int] = []  # output tokens so far, for penalties and grammar (empty when unused)
    seed: int = 0  # sampling: the request's seed; position t's token is drawn with noise keyed by (seed, t)
    banned: list[int] = []  # min_tokens: token ids masked out (EOS, stop ids) ...
    ban_depth: int = 0  # ... at tree rows of depth < ban_depth (root = depth 0)


class VerifyStep(msgspec.Struct, tag="verify_step", frozen=True, kw_only=True):
    round: int
    seqs: list[VerifySeq]
    v: int = PROTOCOL_VERSION


class VerifyOut(msgspec.Struct, frozen=True, kw_only=True):
    """Accepted tree node indices (root to leaf), then the bonus token from the main model."""

    accepted: list[int]
    bonus: int
    logprobs: list[TokenLogprob] | None = None  # one per (accepted tokens + bonus)


class VerifyResult(msgspec.Struct, tag="verify_result", frozen=True, kw_only=True):
    """``failed``: sequences the verifier refuses for good (invalid input, or a forward that
    fails for that sequence alone), with the reason; the scheduler ends them with an error."""

    round: int
    outs: dict[str, VerifyOut]
    lost: list[str] = []
    verify_ms: float = 0.0
    failed: dict[str, str] = {}
    v: int = PROTOCOL_VERSION


class Free(msgspec.Struct, tag="free", frozen=True, kw_only=True):
    """Release the KV slots of these sequences (finished or aborted)."""

    seq_ids: list[str]
    v: int = PROTOCOL_VERSION


class Hello(msgspec.Struct, tag="hello", frozen=True, kw_only=True):
    role: Role
    replica: str
    pid: int
    slots_total: int = 0
    max_len: int = 0
    eos_ids: list[int] = []  # verifier: the main model's end-of-sequence token ids
    cost_ms: list[tuple[int, float]] = []  # measured (tokens per forward, ms) for tree_size auto
    devices: list[str] = []  # where the worker computes ("cpu", "cuda:0", ...): overlap auto
    vocab_size: int = 0  # rows of the model's LM head: token ids are < vocab_size (0 = unknown)
    v: int = PROTOCOL_VERSION


class Heartbeat(msgspec.Struct, tag="heartbeat", frozen=True, kw_only=True):
    """Liveness + load from a worker (or from the scheduler to everyone).

    From the scheduler (``role`` None): ``epoch`` names the scheduler instance; a worker
    that sees a new epoch, or ``ready`` False (the scheduler does not know it: never met,
    or dropped), frees every KV slot and says Hello again."""

    role: Role | None
    replica: str
    ready: bool = True
    slots_used: int = 0
    slots_total: int = 0
    memory_used: int = 0  # bytes (GPU memory on CUDA, resident set on CPU)
    memory_total: int = 0
    prefix_cache_queries: int = 0  # prompt tokens looked up in the prefix cache (since start)
    prefix_cache_hits: int = 0  # ... of them reused from it
    prefix_cache_blocks_used: int = 0
    prefix_cache_blocks_total: int = 0
    epoch: str = ""
    v: int = PROTOCOL_VERSION


class Stats(msgspec.Struct, tag="stats", frozen=True, kw_only=True):
    """Scheduler counters for the gateway's /metrics (cumulative since start)."""

    running: int
    waiting: int
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: list[int]
    tree_size: int
    workers: list[Heartbeat]
    ready: bool
    guesses: int = 0  # draft/verify overlap: look-ahead trees drafted ...
    guess_hits: int = 0  # ... and used (the verifier accepted the assumed path)
    overlap: bool = False  # overlap on now
    epoch: str = ""  # the scheduler instance: a gateway seeing it change ends its in-flight streams
    plain_steps: int = 0  # sequence-rounds verified without a draft tree while speculation is on
    lookup_proposed: int = 0  # prompt-lookup tokens placed in verified trees ...
    lookup_accepted: int = 0  # ... and accepted by the main model
    v: int = PROTOCOL_VERSION


Message = Union[Submit, Abort, TokenDelta, Rejected, DraftStep, DraftResult, VerifyStep,
                VerifyResult, Free, Hello, Heartbeat, Stats]

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Message)


def encode(msg: Message) -> bytes:
    """Serialize one message to msgpack bytes."""
    return _encoder.encode(msg)


def decode(frame: bytes) -> Message:
    """Parse and validate one frame; raises WireError (never anything else) when invalid."""
    if len(frame) > MAX_FRAME_BYTES:
        raise WireError(f"frame of {len(frame)} bytes exceeds {MAX_FRAME_BYTES}")
    try:
        msg = _decoder.decode(frame)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise WireError(str(exc)) from exc
    if msg.v != PROTOCOL_VERSION:
        raise WireError(f"protocol version {msg.v} != {PROTOCOL_VERSION}")
    return msg


def tree_to_wire(tree) -> Tree:
    """common.tree.TokenTree -> Tree."""
    return Tree(tokens=Array.of(tree.tokens), parents=Array.of(tree.parents), scores=Array.of(tree.scores))


def tree_from_wire(t: Tree):
    """Tree -> common.tree.TokenTree; raises WireError when arrays are inconsistent."""
    from common.tree import TokenTree
    try:
        return TokenTree.build(t.tokens.numpy(), t.parents.numpy(), t.scores.numpy())
    except ValueError as exc:
        raise WireError(f"invalid tree: {exc}") from exc
