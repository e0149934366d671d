"""RequestBook: admission answers, and requests that end outside a commit (abort, failure, a sequence the
verifier keeps losing) free their KV and send their gateway one final delta."""

from __future__ import annotations

from common import wire
from services.scheduler.requests import MAX_VERIFY_LOSSES
from tests.scheduler.test_rounds import GW, PARAMS, VERIFIER, deltas, driver


def frees_on(out, ident: bytes) -> set[str]:
    return {sid for i, m in out if i == ident and isinstance(m, wire.Free) for sid in m.seq_ids}


class TestAdmission:
    def test_refusals_are_answered_and_nothing_is_queued(self):
        """Without a verifier a request is refused 503; one too long for the context 400; neither is queued
        or remembered for a gateway."""
        cold = driver(draft=False, verifier=False)
        (gw, rej), = cold.submit(GW, wire.Submit(request_id="r", prompt=[1, 2], params=PARAMS))
        assert gw == GW and rej.status == 503 and not cold.core.waiting and not cold.owners
        drv = driver(draft=True)
        (_, rej), = drv.submit(GW, wire.Submit(request_id="long", prompt=[1] * 200, params=PARAMS))
        assert rej.status == 400 and "context" in rej.reason and not drv.core.waiting and not drv.owners

    def test_an_admitted_request_is_queued_for_its_gateway(self):
        """A valid request answers nothing yet, waits in the queue and is remembered for its gateway."""
        drv = driver(draft=True)
        assert drv.submit(GW, wire.Submit(request_id="r", prompt=[1, 2], params=PARAMS)) == []
        assert [s.request_id for s in drv.core.waiting] == ["r"] and drv.owners == {"r": GW}


class TestEnds:
    def test_abort_frees_the_kv_and_ends_the_stream_once(self):
        """Aborting a request the verifier holds frees its KV there and sends its gateway one ABORT delta;
        a second abort of the same id sends nothing."""
        drv = driver(draft=False)
        drv.had_draft = True
        drv.submit(GW, wire.Submit(request_id="r", prompt=[1, 2], params=PARAMS))
        (_, step), = drv.start(0.0)
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={"r": wire.VerifyOut(accepted=[], bonus=5)}), 0.0)
        out = drv.abort("r")
        (final,) = deltas(out, "r")
        assert final.finish == wire.FinishReason.ABORT and final.tokens == [] and "r" in frees_on(out, VERIFIER)
        assert drv.abort("r") == [] and not drv.owners

    def test_a_sequence_lost_too_often_fails_alone(self):
        """A verifier that reports a sequence lost MAX_VERIFY_LOSSES rounds in a row ends it with an error;
        before that it is re-prefilled, and an unknown id fails nothing."""
        drv = driver(draft=False)
        drv.had_draft = True
        drv.submit(GW, wire.Submit(request_id="r", prompt=[1, 2], params=PARAMS))
        finals = []
        for _ in range(MAX_VERIFY_LOSSES):
            (_, step), = drv.start(0.0)
            finals += deltas(drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={}, lost=["r"]), 0.0), "r")
        (final,) = finals
        assert final.finish == wire.FinishReason.ERROR and "lost this sequence" in final.error
        assert "r" not in drv.core.running and drv.fail("nobody", "x") == []
