"""The exactly-once checker over hand-made data: it must catch each kind of error."""

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pandas as pd

from rewind.demo.events import make_event, malformed_payload
from rewind.demo.transform import DemoTransform
from rewind.proof.contract_proof import records_frame
from rewind.proof.verify import KafkaRecord, check_exactly_once, recompute_windows

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
KW = dict(window=timedelta(seconds=10), watermark_delay=timedelta(seconds=30))
DEMO = DemoTransform()
SPEC = SimpleNamespace(durations=lambda: {"allowed_lateness": timedelta(seconds=20)})


def check(records, events, dead, windows, **kw):  # type: ignore[no-untyped-def]
    """The checker with the demo's own rules: its expect() and its window aggregate (the proof imports neither)."""
    expected = DEMO.expect(records_frame(records), SPEC)
    return check_exactly_once(records, events, dead, windows, expected=expected, aggregate=DEMO.aggregates[0], **kw)


def scenario(n: int = 40):
    records, events, dead = [], [], []
    for i in range(n):
        t = T0 + timedelta(seconds=2 * i)
        ms = int(t.timestamp() * 1000)
        if i % 10 == 9:
            records.append(KafkaRecord("t", i % 2, i, ms, malformed_payload(i)))
            dead.append({"topic": "t", "partition": i % 2, "offset": i})
            continue
        ev = make_event("p", i, t)
        records.append(KafkaRecord("t", i % 2, i, ms, ev.encode()))
        events.append({"event_id": ev.event_id, "key": ev.key, "amount": ev.amount,
                       "event_time": pd.Timestamp(t), "topic": "t", "partition": i % 2, "offset": i})
        if i % 7 == 0:  # a duplicate send: same bytes, new offset; the sink keeps one row
            records.append(KafkaRecord("t", i % 2, 1000 + i, ms, ev.encode()))
    ev_df = pd.DataFrame(events)
    win = recompute_windows(ev_df, timedelta(seconds=10))
    return records, ev_df, pd.DataFrame(dead), win


def test_consistent_sink_passes() -> None:
    records, ev, dead, win = scenario()
    rep = check(records, ev, dead, win, **KW)
    assert rep.ok, rep
    assert rep.duplicate_sends > 0 and rep.expected_dead_letters == 4 and rep.windows_checked == len(win)


def test_missing_event_is_caught() -> None:
    records, ev, dead, win = scenario()
    rep = check(records, ev.iloc[1:], dead, win, **KW)
    assert not rep.ok and rep.missing_events == [ev.iloc[0]["event_id"]]


def test_duplicate_row_is_caught() -> None:
    records, ev, dead, win = scenario()
    rep = check(records, pd.concat([ev, ev.iloc[[3]]]), dead, win, **KW)
    assert not rep.ok and rep.duplicate_event_rows == 1


def test_missing_and_unexpected_dead_letters() -> None:
    records, ev, dead, win = scenario()
    rep = check(records, ev, dead.iloc[1:], win, **KW)
    assert rep.missing_dead_letters == [tuple(dead.iloc[0])]
    extra = pd.concat([dead, pd.DataFrame([{"topic": "t", "partition": 0, "offset": 9999}])])
    assert check(records, ev, extra, win, **KW).unexpected_dead_letters == [("t", 0, 9999)]


def test_window_mismatch_and_missing_window() -> None:
    records, ev, dead, win = scenario()
    bad = win.copy()
    bad.loc[0, "event_count"] += 1
    assert check(records, ev, dead, bad, **KW).window_mismatches
    assert check(records, ev, dead, win.iloc[1:], **KW).missing_windows
    # a running stream emits a window in the batch after its watermark passes it: not missing before
    first = pd.Timestamp(win["window_start"].min())
    assert not check(records, ev, dead, win.iloc[1:], **KW, closed_until=first).missing_windows


def test_event_at_wrong_coordinates() -> None:
    records, ev, dead, win = scenario()
    moved = ev.copy()
    moved.loc[0, "offset"] = 5555
    assert check(records, moved, dead, win, **KW).wrong_coordinates


def test_bounds_keep_only_committed_coordinates() -> None:
    from rewind.proof.verify import below, committed_bounds

    records, ev, dead, win = scenario()
    bounds = committed_bounds({"t": {"0": 20, "1": 10}})
    kept = below(bounds, ev)
    assert all((r.partition == 0 and r.offset < 20) or (r.partition == 1 and r.offset < 10)
               for r in kept.itertuples())
    assert len(kept) < len(ev)


def test_status_counts_offsets_not_scans() -> None:
    from rewind.control.status import _offset_span, lag_of

    assert _offset_span('{"t":{"0":10,"1":5}}', '{"t":{"0":25,"1":5,"2":3}}') == 18
    assert _offset_span(None, {"t": {"0": 7}}) == 7
    assert lag_of({"t": {"0": 5}}, {"t": {"0": 9, "1": 2}}) == {"t/0": 4, "t/1": 2}


def _behind(dead: pd.DataFrame, records: list, offset: int, watermark: datetime) -> pd.DataFrame:
    rec = next(r for r in records if r.offset == offset)
    row = {"topic": rec.topic, "partition": rec.partition, "offset": rec.offset, "reason": "behind_watermark",
           "watermark": pd.Timestamp(watermark)}
    return pd.concat([dead.assign(reason="malformed", watermark=pd.NaT), pd.DataFrame([row])], ignore_index=True)


def test_record_behind_the_watermark_is_a_dead_letter_not_a_missing_event() -> None:
    records, ev, dead, win = scenario()
    late = ev.iloc[2]  # its only record goes to the dead-letter table, as the stream routes it
    ev2 = ev[ev["event_id"] != late["event_id"]]
    win2 = recompute_windows(ev2, timedelta(seconds=10))
    rep = check(records, ev2, _behind(dead, records, int(late["offset"]), T0 + timedelta(minutes=5)),
       win2, **KW)
    assert rep.ok, rep
    assert rep.behind_watermark == 1 and rep.missing_events == []


def test_behind_watermark_needs_an_event_time_behind_it() -> None:
    records, ev, dead, win = scenario()
    late = ev.iloc[2]
    ev2 = ev[ev["event_id"] != late["event_id"]]
    win2 = recompute_windows(ev2, timedelta(seconds=10))
    rep = check(records, ev2, _behind(dead, records, int(late["offset"]), T0 - timedelta(hours=1)),
                win2, **KW)
    assert not rep.ok and len(rep.not_behind_watermark) == 1


def test_a_record_both_event_and_dead_letter_is_caught() -> None:
    records, ev, dead, win = scenario()
    rep = check(records, ev, _behind(dead, records, int(ev.iloc[2]["offset"]), T0 + timedelta(hours=1)),
                win, **KW)
    assert not rep.ok and rep.events_also_dead == [("t", int(ev.iloc[2]["partition"]), int(ev.iloc[2]["offset"]))]


def test_one_duplicate_behind_the_watermark_other_copy_an_event() -> None:
    """An event sent twice: the first copy is the event row, the second arrived behind the watermark."""
    records, ev, dead, win = scenario()
    dup = next(r for r in records if r.offset >= 1000)
    rep = check(records, ev, _behind(dead, records, dup.offset, T0 + timedelta(hours=1)), win, **KW)
    assert rep.ok, rep
    assert rep.behind_watermark == 1


def _per_value(values) -> list:
    """The reference: ``_ts`` value by value, as recompute_windows did before it was vectorised."""
    from rewind.proof.verify import _ts

    return [_ts(v) for v in values]


def test_utc_ns_equals_the_per_value_conversion_for_every_kind_of_time() -> None:
    from zoneinfo import ZoneInfo

    from rewind.proof.verify import utc_ns

    berlin, ny = ZoneInfo("Europe/Berlin"), ZoneInfo("America/New_York")
    naive = datetime(2026, 3, 29, 1, 59, 59, 123456)  # the night Berlin's clocks go forward
    columns = {
        "naive datetimes": [naive + timedelta(seconds=7 * i) for i in range(40)],
        "aware, two zones": [(naive + timedelta(minutes=13 * i)).replace(tzinfo=berlin if i % 2 else ny)
                             for i in range(40)],
        "pandas, us unit, UTC": pd.Series(pd.date_range(T0, periods=40, freq="1500ms")).dt.as_unit("us"),
        "pandas, naive ns": pd.Series(pd.date_range("2026-11-21 12:00", periods=40, freq="37s")),
        "pandas, Berlin": pd.Series(pd.date_range("2026-10-25 00:30", periods=40, freq="5min", tz=berlin)),
        "strings with offsets": [f"2026-11-21T12:{i:02d}:05.25{'+01:00' if i % 3 else 'Z'}" for i in range(40)],
        "strings, mixed formats": ["2026-11-21 12:00:01", "2026-11-21T12:00:02.5+02:00", "21 Nov 2026 12:00:03"],
        "with missing values": [naive, None, pd.NaT, naive + timedelta(days=400)],
        "integers (ns)": [1_795_000_000_000_000_000 + 999_999_937 * i for i in range(40)],
    }
    for name, values in columns.items():
        got = utc_ns(values)
        want = _per_value(values)
        assert str(got.dtype) == "datetime64[ns, UTC]", name
        assert len(got) == len(want), name
        for g, w in zip(got, want):
            assert (pd.isna(g) and pd.isna(w)) or g == w, (name, g, w)


def test_recompute_windows_across_zones_matches_a_per_event_count() -> None:
    """Events whose times come naive, in UTC and in other zones land in the same UTC windows."""
    import random
    from zoneinfo import ZoneInfo

    rng = random.Random(11)
    zones = [None, UTC, ZoneInfo("Asia/Kolkata"), ZoneInfo("America/Los_Angeles")]
    rows = []
    for i in range(3000):
        t = T0 + timedelta(milliseconds=rng.randrange(0, 600_000))
        zone = zones[i % len(zones)]
        shown = t.replace(tzinfo=None) if zone is None else t.astimezone(zone)
        rows.append({"event_id": f"e{i}", "key": f"k{rng.randrange(5)}", "amount": rng.random(), "event_time": shown,
                     "utc": t})
    events = pd.DataFrame(rows)
    got = recompute_windows(events[["event_id", "key", "amount", "event_time"]], timedelta(seconds=10))
    want: dict = {}
    for r in rows:
        start = r["utc"] - timedelta(microseconds=(r["utc"] - T0) // timedelta(microseconds=1) % 10_000_000)
        count, total = want.get((pd.Timestamp(start), r["key"]), (0, 0.0))
        want[(pd.Timestamp(start), r["key"])] = (count + 1, total + r["amount"])
    assert len(got) == len(want)
    for row in got.itertuples():
        count, total = want[(row.window_start, row.key)]
        assert row.event_count == count and abs(row.amount_sum - total) < 1e-9


def test_expect_reads_event_times_that_repeat_beside_a_malformed_record() -> None:
    """3,000 records over 400 event times and one dead letter: pandas 2.3's cached ``to_datetime`` of a
    nullable column maps these through out-of-range positions ('indices' contains values less than
    allowed), which failed a verify in a full suite run; expect() must convert every time."""
    import random

    rng = random.Random(0)  # one of the orders that broke the cached path
    records, times = [], []
    for i in range(3000):
        t = T0 + timedelta(milliseconds=rng.randrange(400))
        times.append(t)
        records.append(KafkaRecord("t", 0, i, int(t.timestamp() * 1000), make_event("r", i, t).encode()))
    bad = rng.randrange(3000)
    records[bad] = KafkaRecord("t", 0, bad, records[bad].timestamp_ms, malformed_payload(bad))
    got = DEMO.expect(records_frame(records), SPEC)
    assert got["event_time"].isna().tolist() == [i == bad for i in range(3000)]
    assert [got["event_time"][i] == pd.Timestamp(times[i]) for i in range(3000) if i != bad] == [True] * 2999
