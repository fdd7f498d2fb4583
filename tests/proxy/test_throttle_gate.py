"""ThrottleGate on an injected clock: when a mute ends, and in what order held responses leave.

The loop and transport here are stand-ins for asyncio's, driven by hand so every instant is exact; the
gate itself is the real one.
"""

from __future__ import annotations

from manual_loop import ManualLoop, RecordingTransport

from sluice.proxy.data_path.flow import ReadPauses
from sluice.proxy.data_path.throttle_gate import ThrottleGate


def make_gate():
    loop, transport = ManualLoop(), RecordingTransport()
    unmuted: list[float] = []
    muted_count = [0]

    def on_mute_change(change: int) -> None:
        muted_count[0] += change

    gate = ThrottleGate(
        loop,
        transport,
        transport.writelines,
        ReadPauses(transport),
        lambda: unmuted.append(loop.now),
        on_mute_change,
    )
    return gate, loop, transport, unmuted, muted_count


def test_mute_lasts_the_throttle_and_then_reading_resumes() -> None:
    gate, loop, transport, unmuted, muted = make_gate()
    gate.mute_for(250)
    assert gate.muted and not transport.reading and muted[0] == 1
    loop.advance(0.249)
    assert gate.muted and gate.remaining_ms() == 1
    loop.advance(0.001)
    assert not gate.muted and transport.reading and muted[0] == 0
    assert unmuted == [100.25]


def test_a_longer_throttle_extends_the_mute_and_a_shorter_one_does_not_shorten_it() -> None:
    gate, loop, _transport, unmuted, _ = make_gate()
    gate.mute_for(100)
    loop.advance(0.05)
    gate.mute_for(300)  # ends at 0.35
    gate.mute_for(10)  # would end at 0.06: changes nothing
    loop.advance(0.29)
    assert gate.muted
    loop.advance(0.01)
    assert unmuted == [100.35]


def test_mute_waits_for_the_throttled_response_to_be_written() -> None:
    gate, loop, transport, unmuted, _ = make_gate()
    transport.buffered = 5_000  # the throttled response is still leaving
    gate.mute_for(100)
    loop.advance(0.5)
    assert gate.muted, "unmuted while the response was still in the write buffer"
    transport.buffered = 0
    loop.advance(1.0)
    assert not gate.muted and len(unmuted) == 1


def test_mute_waits_for_a_throttled_requests_response_from_the_broker() -> None:
    gate, loop, _transport, unmuted, _ = make_gate()
    gate.expect_response()
    gate.mute_for(50)
    loop.advance(0.3)  # the deadline passed, but the broker has not answered yet
    assert gate.muted
    gate.response_sent()
    loop.advance(0.0)
    assert not gate.muted and unmuted == [100.3]


def test_delayed_responses_leave_in_request_order_at_their_deadlines() -> None:
    gate, loop, transport, _unmuted, _ = make_gate()
    gate.hold_response(b"first", 200)
    gate.hold_response(b"second", 0)  # not throttled, but must not overtake the first
    gate.hold_response(b"third", 50)  # a shorter delay, still behind the first
    loop.advance(0.199)
    assert transport.written == []
    loop.advance(0.001)
    assert transport.written == [b"first", b"second", b"third"]
    assert not gate.held_responses


def test_held_responses_say_whether_any_response_is_still_held() -> None:
    """The connection sends a response through the gate only while this says so: it must turn true with
    the first held response and false only once the last has left (else a later answer overtakes a held
    one, or every answer after a delay waits on the timer)."""
    gate, loop, transport, _unmuted, _ = make_gate()
    assert not gate.held_responses
    gate.hold_response(b"first", 100)
    gate.hold_response(b"second", 300)
    assert gate.held_responses
    loop.advance(0.1)
    assert transport.written == [b"first"] and gate.held_responses
    loop.advance(0.2)
    assert transport.written == [b"first", b"second"] and not gate.held_responses
    gate.hold_response(b"third", 0)  # behind nothing: leaves on the next turn of the loop
    assert gate.held_responses
    loop.advance(0.0)
    assert transport.written[-1] == b"third" and not gate.held_responses
    gate.hold_response(b"fourth", 5_000)
    gate.flush_held()
    assert transport.written[-1] == b"fourth" and not gate.held_responses
    gate.hold_response(b"fifth", 5_000)
    gate.close()
    assert not gate.held_responses


def test_flush_sends_held_responses_at_once_in_order() -> None:
    gate, _loop, transport, _unmuted, _ = make_gate()
    gate.hold_response(b"a", 5_000)
    gate.hold_response(b"b", 0)
    gate.flush_held()
    assert transport.written == [b"a", b"b"]


def test_close_resets_the_muted_count() -> None:
    gate, _loop, _transport, _unmuted, muted = make_gate()
    gate.mute_for(1_000)
    assert muted[0] == 1
    gate.close()
    assert muted[0] == 0 and not gate.muted
