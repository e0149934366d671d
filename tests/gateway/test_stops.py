"""Stop strings across chunk boundaries."""

from __future__ import annotations

from services.gateway.stops import StopMatcher


def run(stops, chunks):
    m = StopMatcher(stops)
    out, stopped = [], False
    for c in chunks:
        r = m.push(c)
        out.append(r.text)
        if r.stopped:
            stopped = True
            break
    return "".join(out) + ("" if stopped else m.flush()), stopped, out


class TestStopMatcher:
    def test_stop_within_one_chunk(self):
        """The text before the stop string is returned, the rest dropped."""
        assert run(["END"], ["abcENDxyz"])[:2] == ("abc", True)

    def test_stop_split_across_chunks(self):
        """A stop string spread over three chunks still matches; nothing of it leaks."""
        text, stopped, out = run(["STOP"], ["hello S", "T", "OP tail"])
        assert (text, stopped) == ("hello ", True)
        assert out == ["hello ", "", ""]

    def test_false_start_is_released(self):
        """A held-back partial match is emitted once it cannot be a stop string."""
        text, stopped, out = run(["STOP"], ["abc ST", "ART"])
        assert (text, stopped) == ("abc START", False)
        assert out == ["abc ", "START"]

    def test_earliest_of_several_stops(self):
        """With several stop strings the earliest occurrence wins."""
        assert run(["\n\n", "b"], ["a\n", "\nb"])[:2] == ("a", True)

    def test_no_stops_passes_through(self):
        """Without stop strings text is never held back."""
        assert run([], ["a", "b"])[2] == ["a", "b"]

    def test_result_names_the_stop_that_matched(self):
        """The earliest match wins; on a tie at one position the shorter stop string."""
        assert StopMatcher(["yz", "cE", "cEN"]).push("abcENDxyz").stop == "cE"
