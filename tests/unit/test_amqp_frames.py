"""A published message's content frames (gapless.amqp.frames) are pamqp's bytes exactly, for
the work messages the fast path makes and for every kind it hands to pamqp."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pamqp.frame
from aiormq import spec
from hypothesis import example, given
from hypothesis import strategies as st
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from gapless.amqp import frames
from gapless.amqp.publisher import _properties

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
stamps = st.one_of(
    st.none(),
    st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1),
                 timezones=st.sampled_from([UTC, timezone(timedelta(hours=3))])),
    st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1)))  # naive
properties = st.builds(
    spec.Basic.Properties,
    content_type=st.one_of(st.none(), st.just(""), st.just("application/json"), texts),
    content_encoding=st.one_of(st.none(), texts),
    headers=st.one_of(st.none(), st.just({}),
                      st.dictionaries(st.text(min_size=1, max_size=8),
                                      st.one_of(st.integers(-2**31, 2**31 - 1), texts),
                                      min_size=1, max_size=3)),
    delivery_mode=st.one_of(st.none(), st.sampled_from([1, 2])),
    priority=st.one_of(st.none(), st.integers(0, 255)),
    correlation_id=st.one_of(st.none(), texts),
    message_id=st.one_of(st.none(), st.just(""), texts,
                         st.text(min_size=60, max_size=90)),  # past 255 bytes in UTF-8 at times
    timestamp=stamps,
    app_id=st.one_of(st.none(), st.just("gapless"), texts),
)


def pamqp_header(channel: int, props: spec.Basic.Properties, size: int) -> bytes:
    return pamqp.frame.marshal(ContentHeader(body_size=size, properties=props), channel)


def test_a_work_message_header_is_pamqps() -> None:
    for priority in (1, 4):
        for message_id in ("inv-1", "İrsaliye-ğ-2026/0001", "x" * 255):
            props = _properties(message_id=message_id, priority=priority)
            for size in (0, 1, 280, 2**40):
                assert frames.content_header(7, props, size) == pamqp_header(7, props, size)


@given(props=properties, channel=st.integers(1, 2**16 - 1), size=st.integers(0, 2**63 - 1))
@example(props=spec.Basic.Properties(message_id="é" * 128, headers={}), channel=1, size=3)
def test_any_header_is_pamqps(props: spec.Basic.Properties, channel: int, size: int) -> None:
    try:
        expected = pamqp_header(channel, props, size)
    except (TypeError, ValueError) as exc:  # pamqp refuses it: so does the fast path
        refused = type(exc)
        try:
            frames.content_header(channel, props, size)
        except refused:
            return
        raise AssertionError("pamqp refuses these properties; the fast path must too") from None
    assert frames.content_header(channel, props, size) == expected
    assert frames.content_header(channel, props, size) == expected  # kept parts reused


@given(body=st.binary(max_size=3000), largest=st.integers(1, 1100),
       channel=st.integers(1, 2**16 - 1))
def test_body_frames_are_pamqps(body: bytes, largest: int, channel: int) -> None:
    expected = [pamqp.frame.marshal(ContentBody(body[start:start + largest]), channel)
                for start in range(0, len(body), largest)]
    assert list(frames.body_frames(channel, body, largest)) == expected
