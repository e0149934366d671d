"""In-memory stand-ins for the gateway's collaborators: a byte tokenizer and a scripted
backend with the same interface as services.gateway.backend.ZmqBackend."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from common import wire
from services.gateway.backend import BackendRejected, BackendUnavailable

EOS = 256


class ByteTokenizer:
    """Token i < 256 is byte i; 256 is EOS. A multi-byte character spans several tokens."""

    vocab_size = 257
    chat_template = "fake"

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(text.encode())

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        if not skip_special_tokens and ids == [EOS]:
            return "<eos>"
        return bytes(i for i in ids if i < 256).decode(errors="replace")

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            tools: list[dict] | None = None) -> str:
        head = "".join(f"<tools>{t['function']['name']}\n" for t in tools or [])
        return head + "".join(f"<{m['role']}>{m['content']}\n" for m in messages) + "<assistant>"

    def end_token_ids(self) -> list[int]:
        return [EOS]


def deltas(rid: str, chunks: list[str], finish=wire.FinishReason.LENGTH, logprobs: bool = False):
    """TokenDeltas carrying ``chunks`` as byte tokens, the last one finished."""
    out = []
    for i, chunk in enumerate(chunks):
        toks = list(chunk.encode())
        lps = [wire.TokenLogprob(logprob=-0.5, top=[(t, -0.5)]) for t in toks] if logprobs else None
        last = i == len(chunks) - 1
        out.append(wire.TokenDelta(request_id=rid, tokens=toks, logprobs=lps, finish=finish if last else None,
                                   prompt_tokens=3 if i == 0 else 0))
    return out


@dataclass
class FakeBackend:
    """Plays ``script(submit)`` -> list of TokenDelta / Rejected / Exception per request.

    A script ending without a finished delta leaves the request hanging (like a scheduler
    still generating) until it is aborted.
    """

    script: object = None
    ready: bool = True
    connected: bool = True
    stats: wire.Stats | None = None
    delay_s: float = 0.0
    submits: list[wire.Submit] = field(default_factory=list)
    aborts: list[str] = field(default_factory=list)
    started: bool = False

    async def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.started = False

    async def abort(self, request_id: str) -> None:
        self.aborts.append(request_id)

    async def generate(self, request_id, prompt, params):
        submit = wire.Submit(request_id=request_id, prompt=prompt, params=params)
        self.submits.append(submit)
        script = self.script or (lambda s: deltas(s.request_id, ["hello", " world"]))
        for item in script(submit):
            await asyncio.sleep(self.delay_s)
            if isinstance(item, wire.Rejected):
                raise BackendRejected(item.status, item.reason, item.retry_after_s)
            if isinstance(item, Exception):
                raise item
            yield item
            if item.finish is not None:
                return
        while request_id not in self.aborts:
            await asyncio.sleep(0.01)


def silent_after(chunks: list[str]):
    """A script: some deltas, then the scheduler goes silent."""
    return lambda s: deltas(s.request_id, chunks + ["x"])[:-1] + [BackendUnavailable("scheduler silent")]
