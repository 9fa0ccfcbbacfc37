"""Kafka look-ups and range reads through confluent-kafka (librdkafka).

Why the end offset is not simply ``get_watermark_offsets``: the embedded broker (Tansu) answers
ListOffsets(latest) with a value below the true end, while the high watermark carried in Fetch
responses is right. So the true end of a partition is found the way a consumer sees it: assign
the partition at an offset known to be at or below the end and consume until librdkafka reports
``_PARTITION_EOF``; that event's offset is the end offset from the Fetch response (the last stable
offset for ``read_committed`` consumers, the high watermark otherwise). On real Kafka, ListOffsets
is exact, so the consumer is assigned right at the end and the EOF arrives after one empty fetch.

Fetch waits: Tansu answers a Fetch when ``fetch.wait.max.ms`` runs out, with whatever it gathered
by then, and every Fetch first lists all record-batch objects (one per produced batch) of the
partition in S3. On a partition of thousands of tiny batches (a rate-limited producer) that
listing outlasts a 50 ms wait, so such fetches come back empty below the high watermark, without
error or EOF. Look-ups keep the 50 ms wait (a fast EOF) and retry only such partitions with longer
waits; range reads raise their wait when a read yields too little (see ``iter_range``).

Public entry points other modules should use:
- ``KafkaOffsetClient`` (one cached consumer): ``partitions``, ``earliest_offsets``,
  ``end_offsets``, ``offsets_for_times``;
- ``true_end_offsets`` / ``earliest_offsets``: one-shot helpers (used by the replay planner);
- ``iter_range``: the records of ``[from, until)`` of one partition, in batches.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from typing import Any, Iterable, Iterator, Mapping

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from rewind.kafka.offsets import (
    TP,
    DataLossError,
    OffsetRange,
    Offsets,
    UnknownTopicError,
)

log = logging.getLogger(__name__)

EOF = KafkaError._PARTITION_EOF
_OUT_OF_RANGE = {KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET}
_RETRIABLE_METADATA = {KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
                       KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._WAIT_COORD}
_POLL_S = 0.05             # short consume() waits: consume() blocks until num_messages or the timeout
_LOOKUP_POLL_S = 0.01      # look-ups mostly wait for one EOF event per partition
_HINT_STALL_S = 5.0        # a guessed start position that yields nothing this long is abandoned
_TIMESTAMP_WINDOW = 64     # records read before the broker's timestamp answer to confirm it
_JUMP_MIN_OFFSETS = 2_000  # seek to the fetched high watermark rather than read more than this
_READ_CHASE_S = 1.0        # reading for this long without EOF (a moving end): stop at what was read
_SILENT_END_S = 2.0        # no record and no EOF this long: end at the start position (no progress)
_JUMP_WAIT_S = 1.0         # no EOF this long after such a seek: an open transaction, read on instead
_SLOW_LOOKUP_WAITS_MS = (1_000, 4_000)  # fetch waits for partitions that sent nothing at the look-up's 50 ms
# Range reads (see iter_range): Tansu answers a Fetch when fetch.wait.max.ms runs out with whatever it
# gathered by then, and each Fetch first lists every record-batch object of the partition. With many
# tiny batches that listing alone outlasts a 50 ms wait, so fetches come back empty and the read stalls.
_MIN_FETCH_WAIT_MS = 50       # never less (a 10 ms fetch went unanswered on Tansu: that listing again)
_MAX_FETCH_WAIT_MS = 10_000   # the longest fetch wait a range read escalates to
_FETCH_WAIT_STEP = 4          # escalation factor: 50 -> 200 -> 800 -> 3,200 -> 10,000 ms
_RANGE_WINDOW_S = 1.0         # a range read's progress is judged over windows at least this long ...
_WINDOW_FETCHES = 4           # ... and at least this many fetch waits
_MIN_RECORDS_PER_FETCH = 128  # fewer records than this per fetch wait: the wait is too short, raise it
_range_waits: dict[tuple[str, str, int], int] = {}  # fetch wait a partition needed (per worker process)


class KafkaTimeoutError(TimeoutError):
    """The broker did not answer a look-up or a read within the configured time."""


def base_consumer_config(bootstrap_servers: str, extra: Mapping[str, Any] | None = None, *,
                         group_id: str = "rewind-kafka-source",
                         auto_offset_reset: str = "error") -> dict[str, Any]:
    """Consumer settings for assign-only reading: no group membership, no commits, EOF events on.

    ``extra`` (the user's ``kafka.*`` options) wins over the defaults, except for the settings
    the source relies on.
    """
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": group_id,
        "fetch.wait.max.ms": 50,          # an empty fetch at the end answers quickly (EOF latency)
        "allow.auto.create.topics": False,
        "topic.metadata.refresh.interval.ms": 60_000,
        "log_level": 3,
    }
    conf.update(dict(extra or {}))
    conf.update({
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": auto_offset_reset,
    })
    return conf


def _tp_list(tps: Iterable[TP], offsets: Mapping[TP, int] | None = None) -> list[TopicPartition]:
    if offsets is None:
        return [TopicPartition(tp.topic, tp.partition) for tp in tps]
    return [TopicPartition(tp.topic, tp.partition, int(offsets[tp])) for tp in tps]


class KafkaOffsetClient:
    """Driver-side look-ups through one lazily created consumer, reused across micro-batches.

    Not picklable state: the consumer is dropped by ``__getstate__`` and recreated on first use.
    """

    def __init__(self, config: Mapping[str, Any], timeout_s: float = 120.0) -> None:
        conf = dict(config)
        conf["auto.offset.reset"] = "error"     # a bad guessed position must surface, not be reset
        conf["enable.partition.eof"] = True
        # Fast EOF at the end, but not below 50 ms: Tansu leaves fetches with a 10 ms max wait
        # unanswered (measured: no answer in 6 s at positions a 50 ms fetch got in 0.4 s).
        conf["fetch.wait.max.ms"] = max(50, min(int(conf.get("fetch.wait.max.ms", 50)), 100))
        self.config = conf
        self.timeout_s = float(timeout_s)
        self._consumer: Consumer | None = None

    # -- lifecycle --------------------------------------------------------------------------
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(self.config)
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except (KafkaException, RuntimeError):  # already closed
                pass
            self._consumer = None

    def __enter__(self) -> "KafkaOffsetClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_consumer"] = None
        return state

    # -- metadata ---------------------------------------------------------------------------
    def partitions(self, topics: Iterable[str]) -> list[TP]:
        """All partitions of ``topics``, sorted; ``UnknownTopicError`` names a missing topic."""
        out: list[TP] = []
        for topic in topics:
            out.extend(TP(topic, p) for p in self._topic_partitions(topic))
        return sorted(out)

    def _topic_partitions(self, topic: str) -> list[int]:
        deadline = time.monotonic() + self.timeout_s
        last_error: Any = None
        while True:
            try:
                md = self.consumer().list_topics(topic=topic, timeout=min(10.0, self.timeout_s))
            except KafkaException as exc:
                last_error = exc.args[0] if exc.args else exc
            else:
                tmd = md.topics.get(topic)
                err = tmd.error if tmd is not None else None
                if tmd is not None and err is None and tmd.partitions:
                    return sorted(tmd.partitions)
                if err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise UnknownTopicError(
                        f"subscribed topic {topic!r} does not exist on {self.config.get('bootstrap.servers')}")
                last_error = err or "no partitions in metadata"
                if err is not None and err.code() not in _RETRIABLE_METADATA:
                    raise KafkaException(err)
            if time.monotonic() > deadline:
                raise KafkaTimeoutError(f"no metadata for topic {topic!r} after {self.timeout_s:.0f}s: {last_error}")
            time.sleep(0.2)

    # -- offsets ----------------------------------------------------------------------------
    def _list_offsets(self, query: Mapping[TP, int]) -> dict[TP, int]:
        """ListOffsets by timestamp (-2 earliest, -1 latest, else ms) for many partitions at once."""
        if not query:
            return {}
        tps = sorted(query)
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                res = self.consumer().offsets_for_times(_tp_list(tps, query), timeout=min(10.0, self.timeout_s))
                errors = [r for r in res if r.error is not None]
                if not errors:
                    return {TP(r.topic, r.partition): r.offset for r in res}
                err = errors[0].error
                if err.code() not in _RETRIABLE_METADATA:
                    raise KafkaException(err)
                last: Any = err
            except KafkaException as exc:
                kerr = exc.args[0] if exc.args else None
                if not isinstance(kerr, KafkaError) or kerr.code() not in _RETRIABLE_METADATA:
                    raise
                last = kerr
            if time.monotonic() > deadline:
                raise KafkaTimeoutError(f"ListOffsets did not answer within {self.timeout_s:.0f}s: {last}")
            time.sleep(0.2)

    def earliest_offsets(self, tps: Iterable[TP]) -> Offsets:
        """The earliest retained offset of each partition (ListOffsets(earliest) is right everywhere)."""
        return self._list_offsets({tp: -2 for tp in tps})

    def listed_latest_offsets(self, tps: Iterable[TP]) -> Offsets:
        """ListOffsets(latest) as the broker answers it: exact on Kafka, too LOW on Tansu.

        Only safe as a lower bound of the end; use ``end_offsets`` for the end itself.
        """
        return self._list_offsets({tp: -1 for tp in tps})

    def offsets_for_times(self, stamps: Mapping[TP, int], earliest: Mapping[TP, int] | None = None,
                          ends: Mapping[TP, int] | None = None) -> dict[TP, int | None]:
        """The first offset whose record timestamp is >= the given ms, or None when there is none.

        ListOffsets(timestamp) is exact on Kafka but arbitrary on Tansu (too high or too low), so
        the broker's answer is only a candidate: records are read from a little before it up to
        the first record at or after the timestamp. The answer is accepted when a record before it
        is older than the timestamp (always true for Kafka's own answer); otherwise the partition
        is scanned from its earliest offset. Assumes timestamps grow with offsets on brokers whose
        answer cannot be trusted. ``earliest`` / ``ends`` save look-ups when the caller has them.
        """
        if not stamps:
            return {}
        tps = sorted(stamps)
        answers = self._list_offsets(stamps)
        if earliest is None or any(tp not in earliest for tp in tps):
            earliest = self.earliest_offsets(tps)
        if ends is None or any(tp not in ends for tp in tps):
            ends = self.end_offsets(tps)
        starts: Offsets = {}
        for tp in tps:
            candidate = answers[tp] if answers[tp] is not None and answers[tp] >= 0 else ends[tp]
            candidate = min(max(candidate, earliest[tp]), ends[tp])
            starts[tp] = max(earliest[tp], candidate - _TIMESTAMP_WINDOW)
        found, unsure = self._scan_timestamps(starts, stamps, earliest, ends)
        if unsure:
            log.info("timestamp look-up: scanning %s from earliest (broker answer not confirmed)", sorted(unsure))
            more, _ = self._scan_timestamps({tp: earliest[tp] for tp in unsure}, stamps, earliest, ends)
            found.update(more)
        return {tp: found[tp] for tp in tps}

    def _scan_timestamps(self, starts: Mapping[TP, int], targets: Mapping[TP, int], earliest: Mapping[TP, int],
                         ends: Mapping[TP, int]) -> tuple[dict[TP, int | None], set[TP]]:
        """Read forward from ``starts`` to the first record with timestamp >= target (None: none).

        Returns (answers, unsure): an answer is sure when the scan began at earliest or saw an
        older record before it.
        """
        found: dict[TP, int | None] = {}
        unsure: set[TP] = set()
        seen_older = {tp: False for tp in starts}

        def finish(tp: TP, offset: int | None) -> None:
            found[tp] = offset
            if not (seen_older[tp] or starts[tp] <= earliest[tp]):
                unsure.add(tp)
            pending.discard(tp)

        pending = set(starts)
        for tp in list(pending):
            if starts[tp] >= ends[tp]:
                finish(tp, None)
        if not pending:
            return found, unsure
        consumer = self.consumer()
        consumer.assign(_tp_list(sorted(pending), starts))
        last_progress = time.monotonic()
        try:
            while pending:
                msgs = consumer.consume(num_messages=10_000, timeout=_LOOKUP_POLL_S)
                if msgs:
                    last_progress = time.monotonic()
                elif time.monotonic() - last_progress > self.timeout_s:
                    raise KafkaTimeoutError(
                        f"broker did not answer fetches for {sorted(pending)} within {self.timeout_s:.0f}s")
                for m in msgs:
                    topic = m.topic()
                    if topic is None:
                        continue
                    tp = TP(topic, m.partition())
                    if tp not in pending:
                        continue
                    err = m.error()
                    if err is not None:
                        if err.code() == EOF:
                            finish(tp, None)
                        elif not err.retriable():
                            raise KafkaException(err)
                        continue
                    offset = m.offset()
                    if offset >= ends[tp]:
                        finish(tp, None)
                    elif m.timestamp()[1] >= targets[tp]:
                        finish(tp, offset)
                    else:
                        seen_older[tp] = True
        finally:
            try:
                consumer.unassign()
            except KafkaException:
                pass
        return found, unsure

    def end_offsets(self, tps: Iterable[TP], hints: Mapping[TP, int] | None = None) -> Offsets:
        """The true end offset of each partition (see the module docstring for why and how).

        ``hints`` are end offsets seen before (e.g. the previous micro-batch's): starting there keeps
        the bytes read small on brokers whose ListOffsets is too low. A hint beyond the end (the
        topic was recreated) yields nothing or an out-of-range error; those partitions are retried
        from their earliest offset. A partition that sends nothing at the short look-up wait though
        the Fetch high watermark is above the position is read again with longer waits
        (``_slow_end_offsets``), not ended at its start position.
        """
        tps = sorted(set(tps))
        if not tps:
            return {}
        earliest = self.earliest_offsets(tps)
        listed = self.listed_latest_offsets(tps)
        hints = hints or {}
        first = {tp: max(earliest[tp], listed[tp], hints.get(tp, -1)) for tp in tps}
        guessed = {tp for tp in tps if hints.get(tp, -1) > max(earliest[tp], listed[tp])}
        found, failed, slow = self._eof_offsets(first, stall_s=min(_HINT_STALL_S, self.timeout_s) if guessed else None)
        more, more_failed = self._slow_end_offsets(slow)
        found.update(more)
        failed.update(more_failed)
        retry = {tp: earliest[tp] for tp in failed}
        if retry:
            log.info("end offset look-up retried from earliest for %s (%s)", sorted(retry),
                     {str(tp): failed[tp] for tp in retry})
            more, still, slow = self._eof_offsets(retry, stall_s=None)
            found.update(more)
            more, more_failed = self._slow_end_offsets(slow)
            found.update(more)
            still.update(more_failed)
            if still:
                raise KafkaTimeoutError(
                    "could not find the end offset of "
                    + ", ".join(f"{tp.topic}[{tp.partition}] ({still[tp]})" for tp in sorted(still)))
        return {tp: found[tp] for tp in tps}

    def _eof_offsets(self, positions: Mapping[TP, int], stall_s: float | None, consumer: Consumer | None = None,
                     wait_s: float | None = None) -> tuple[Offsets, dict[TP, str], Offsets]:
        """Assign at ``positions`` and consume until each partition reports EOF.

        The first Fetch response for a partition carries its true high watermark: when that is far
        ahead, the consumer seeks there instead of reading everything in between. With
        read_committed and an open transaction the EOF comes at the last stable offset, below the
        high watermark, so a jump that brings no EOF within ``_JUMP_WAIT_S`` seeks back and reads on.

        A partition that delivered records but no EOF within ``_READ_CHASE_S`` ends one past the
        last record read (a moving end). Returns (end offsets, failures, slow partitions). A
        partition fails on a fetch error, or (when ``stall_s`` is given) when nothing at all arrives
        for it within ``stall_s`` seconds. A partition silent for ``_SILENT_END_S`` while the high
        watermark of the (empty) Fetch responses is above its position is slow, not at its end:
        Tansu answers a fetch with what it gathered when the wait runs out, which on a partition of
        many tiny record batches is nothing, every time; it is returned with its position for a
        retry with a longer wait. With no ``stall_s``, any other partition silent that long ends at
        its start position (no new data this time); silence past a shorter client timeout raises
        ``KafkaTimeoutError``. ``consumer`` / ``wait_s``: another consumer and its fetch wait (the
        time limits above grow with a long wait).
        """
        if consumer is None:
            consumer = self.consumer()
            wait_s = int(self.config["fetch.wait.max.ms"]) / 1000
        wait_s = wait_s or 0.0
        chase_s = max(_READ_CHASE_S, 2 * wait_s)
        silent_s = max(_SILENT_END_S, 3 * wait_s)
        jump_wait_s = max(_JUMP_WAIT_S, 2 * wait_s)
        pending = set(positions)
        found: Offsets = {}
        failed: dict[TP, str] = {}
        start = time.monotonic()
        last_seen = {tp: start for tp in pending}
        jumped: dict[TP, tuple[int, float, int]] = {}  # tp -> (jumped to, when, where to resume)
        settled: set[TP] = set()                      # partitions that read on without jumping
        read_to: Offsets = {}                         # one past the last record actually read
        silent: list[TP] = []                         # partitions that answered nothing this time
        slow: Offsets = {}                            # ... though the broker holds records past them
        consumer.assign(_tp_list(sorted(positions), positions))
        try:
            while pending:
                msgs = consumer.consume(num_messages=10_000, timeout=_LOOKUP_POLL_S)
                now = time.monotonic()
                for m in msgs:
                    err = m.error()
                    topic = m.topic()
                    if topic is None:
                        if err is not None:
                            log.warning("Kafka client error during end-offset look-up: %s", err)
                        continue
                    tp = TP(topic, m.partition())
                    if tp not in pending:
                        continue
                    last_seen[tp] = now
                    if err is None:
                        read_to[tp] = m.offset() + 1
                        if tp not in jumped and tp not in settled:
                            self._maybe_jump(consumer, tp, m.offset() + 1, now, jumped, settled)
                        continue
                    if err.code() == EOF:
                        found[tp] = m.offset()
                    else:
                        failed[tp] = str(err)
                    pending.discard(tp)
                for tp in list(pending):
                    if tp not in jumped and tp in read_to and now - start > chase_s:
                        # Records arrived but no EOF follows (Tansu under concurrent writes reports a
                        # high watermark ahead of what it serves, so the reader would chase a moving
                        # end): what was read is surely readable, and later batches take the rest.
                        found[tp] = read_to[tp]
                        pending.discard(tp)
                        continue
                    if tp in jumped and now - jumped[tp][1] > jump_wait_s:
                        resume = jumped.pop(tp)[2]
                        settled.add(tp)
                        last_seen[tp] = now
                        consumer.seek(TopicPartition(tp.topic, tp.partition, resume))
                        continue
                    idle = now - last_seen[tp]
                    if tp not in jumped and idle > silent_s and _fetched_high(consumer, tp) > positions[tp]:
                        slow[tp] = positions[tp]
                        pending.discard(tp)
                        continue
                    if stall_s is None and tp not in jumped and idle > silent_s:
                        # Neither a record nor EOF (seen on Tansu with a too-short fetch wait): the
                        # start position is a safe end (no new data this time) and the next look-up
                        # tries again, rather than the micro-batch waiting out the whole timeout.
                        found[tp] = positions[tp]
                        silent.append(tp)
                        pending.discard(tp)
                        continue
                    if stall_s is not None and idle > stall_s:
                        failed[tp] = f"nothing fetched from offset {positions[tp]} in {stall_s:.0f}s"
                        pending.discard(tp)
                    elif idle > self.timeout_s:
                        raise KafkaTimeoutError(
                            f"broker did not answer fetches for {tp.topic}[{tp.partition}] at offset "
                            f"{positions[tp]} within {self.timeout_s:.0f}s")
        finally:
            try:
                consumer.unassign()
            except KafkaException:
                pass
        if silent:
            log.warning("end-offset look-up: no answer from %s within %.0fs; no new data taken from them "
                        "this time", ", ".join(f"{tp}@{positions[tp]}" for tp in silent), silent_s)
        return found, failed, slow

    def _slow_end_offsets(self, positions: Mapping[TP, int]) -> tuple[Offsets, dict[TP, str]]:
        """End offsets of partitions that sent nothing at the look-up's short fetch wait though records
        lie past ``positions`` (see ``_eof_offsets``): read again by a consumer of their own with
        longer waits, so every other look-up keeps its 50 ms EOF latency. Nothing even at the
        longest wait: the start position (no new data taken this time). Returns (ends, failures).
        """
        found: Offsets = {}
        failed: dict[TP, str] = {}
        pending = dict(positions)
        limit_ms = int(self.config.get("socket.timeout.ms", 60_000)) - 1_000  # librdkafka's rule
        for wait_ms in sorted({min(w, limit_ms) for w in _SLOW_LOOKUP_WAITS_MS}):
            if not pending:
                break
            log.info("end-offset look-up: nothing fetched from %s although records follow; retrying with "
                     "fetch.wait.max.ms=%d", ", ".join(f"{tp}@{off}" for tp, off in sorted(pending.items())), wait_ms)
            consumer = Consumer({**self.config, "fetch.wait.max.ms": wait_ms})
            try:
                more, more_failed, pending = self._eof_offsets(pending, None, consumer, wait_ms / 1000)
            finally:
                consumer.close()
            found.update(more)
            failed.update(more_failed)
        if pending:
            log.warning("end-offset look-up: still nothing fetched from %s; no new data taken from them this time",
                        ", ".join(f"{tp}@{off}" for tp, off in sorted(pending.items())))
            found.update(pending)
        return found, failed

    @staticmethod
    def _maybe_jump(consumer: Consumer, tp: TP, next_offset: int, now: float,
                    jumped: dict[TP, tuple[int, float, int]], settled: set[TP]) -> None:
        """Seek to the high watermark of the Fetch response when it is far ahead of ``next_offset``."""
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), cached=True)
        except KafkaException:
            high = -1
        if high is None or high - next_offset <= _JUMP_MIN_OFFSETS:
            settled.add(tp)
            return
        try:
            consumer.seek(TopicPartition(tp.topic, tp.partition, high))
        except KafkaException as exc:
            log.debug("seek to high watermark of %s failed (%s); reading on", tp, exc)
            settled.add(tp)
            return
        jumped[tp] = (high, now, next_offset)


def _fetched_high(consumer: Consumer, tp: TP) -> int:
    """The high watermark of the last Fetch response for ``tp`` (-1 when none was seen)."""
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), cached=True)
    except KafkaException:
        return -1
    return high if high is not None and high >= 0 else -1


# ---------------------------------------------------------------------------------------------
# One-shot helpers (the replay planner and tools use these)
# ---------------------------------------------------------------------------------------------


def _as_tps(client: KafkaOffsetClient, what: Iterable[TP | str] | str) -> list[TP]:
    if isinstance(what, str):
        what = [t.strip() for t in what.split(",") if t.strip()]
    tps: list[TP] = []
    topics: list[str] = []
    for item in what:
        if isinstance(item, str):
            topics.append(item)
        else:
            tps.append(TP(item[0], int(item[1])))
    return sorted(set(tps) | set(client.partitions(topics)))


def true_end_offsets(bootstrap_servers: str, partitions: Iterable[TP | str] | str,
                     config: Mapping[str, Any] | None = None, timeout_s: float = 60.0) -> Offsets:
    """True end offset of every partition (topic names expand to all their partitions).

    Correct on Tansu (whose ListOffsets(latest) is too low) and on Kafka; for
    ``isolation.level=read_committed`` (librdkafka's default) it is the last stable offset.
    """
    with KafkaOffsetClient(base_consumer_config(bootstrap_servers, config), timeout_s) as client:
        return client.end_offsets(_as_tps(client, partitions))


def earliest_offsets(bootstrap_servers: str, partitions: Iterable[TP | str] | str,
                     config: Mapping[str, Any] | None = None, timeout_s: float = 60.0) -> Offsets:
    """Earliest retained offset of every partition (topic names expand to all their partitions)."""
    with KafkaOffsetClient(base_consumer_config(bootstrap_servers, config), timeout_s) as client:
        return client.earliest_offsets(_as_tps(client, partitions))


# ---------------------------------------------------------------------------------------------
# Reading one range
# ---------------------------------------------------------------------------------------------


def iter_range(config: Mapping[str, Any], rng: OffsetRange, batch_size: int, timeout_s: float,
               fail_on_data_loss: bool = True) -> Iterator[list[Message]]:
    """The data records of ``[rng.from_offset, rng.until_offset)`` in lists of up to ``batch_size``.

    Offsets may have gaps (transaction markers take offsets, and the last offset before ``until``
    may be one), so the read ends when a record at or beyond ``until`` arrives or librdkafka
    reports EOF at or beyond ``until``, never by waiting for offset ``until - 1``. Silence from
    the broker for ``timeout_s`` raises ``KafkaTimeoutError``.

    The fetch wait starts at the configured ``fetch.wait.max.ms`` (at least 50 ms). When a window
    of reading (>= 1 s and >= 4 waits) yields fewer than 128 records per wait, the wait is too short
    for the broker (Tansu answers at the wait with what it gathered, often nothing, when a partition
    holds many tiny record batches): the consumer is recreated at the next offset with a 4x longer
    wait (up to 10 s). The wait a partition needed is remembered by this process for later reads.
    """
    until = rng.until_offset
    if until <= rng.from_offset:
        return
    where = f"{rng.topic}[{rng.partition}] range [{rng.from_offset}, {until})"
    key = (str(config.get("bootstrap.servers", "")), rng.topic, rng.partition)
    configured_ms = max(_MIN_FETCH_WAIT_MS, int(config.get("fetch.wait.max.ms", 500)))
    socket_timeout_ms = int(config.get("socket.timeout.ms", 60_000))  # librdkafka: must exceed the wait by 1 s
    max_wait_ms = max(_MIN_FETCH_WAIT_MS, min(_MAX_FETCH_WAIT_MS, socket_timeout_ms - 1_000))
    wait_ms = max(configured_ms, min(_range_waits.get(key, 0), max_wait_ms))
    next_offset = rng.from_offset
    consumer = _range_consumer(config, wait_ms, rng.topic, rng.partition, next_offset)
    try:
        pending: list[Message] = []
        last_progress = window_start = time.monotonic()
        window_records = 0
        done = False
        while not done:
            # +1: the record or EOF just past the range ends the read without waiting a poll.
            want = max(1, min(batch_size - len(pending), until - next_offset + 1))
            msgs = consumer.consume(num_messages=want, timeout=_POLL_S)
            if not msgs:
                if time.monotonic() - last_progress > timeout_s:
                    raise KafkaTimeoutError(
                        f"no answer from Kafka for {timeout_s:.0f}s while reading {where} at offset {next_offset} "
                        f"(kafkaConsumer.pollTimeoutMs; fetch wait {wait_ms} ms)")
            eof_below: int | None = None
            if any([m.error() is not None for m in msgs]):
                data = []
                for m in msgs:
                    err = m.error()
                    if err is None:
                        data.append(m)
                        continue
                    code = err.code()
                    if code == EOF:
                        last_progress = time.monotonic()
                        if m.offset() >= until:
                            done = True
                        else:
                            eof_below = m.offset()
                    elif code in _OUT_OF_RANGE:
                        raise DataLossError(
                            f"data loss reading {where}: offset {next_offset} is no longer available ({err}). "
                            "Set failOnDataLoss=false to continue from the earliest offset.")
                    elif err.fatal() or (m.topic() is not None and not err.retriable()):
                        raise KafkaException(err)
                    else:  # transient (broker down, transport): librdkafka retries on its own
                        log.warning("Kafka client error while reading %s: %s", where, err)
                msgs = data
            if msgs:
                last_progress = time.monotonic()
                window_records += len(msgs)
                if msgs[-1].offset() >= until:
                    offsets = [m.offset() for m in msgs]
                    msgs = msgs[:bisect_left(offsets, until)]
                    done = True
                if msgs:
                    next_offset = msgs[-1].offset() + 1
                    pending.extend(msgs)
            if eof_below is not None and not done:
                # EOF is reported after every record before it, so the range cannot be completed.
                _end_below_range(where, eof_below, fail_on_data_loss)
                done = True
            if next_offset >= until:
                done = True
            if not done and wait_ms < max_wait_ms:
                now = time.monotonic()
                window_s = now - window_start
                if window_s >= max(_RANGE_WINDOW_S, _WINDOW_FETCHES * wait_ms / 1000):
                    if _fetch_wait_too_short(window_records, window_s, wait_ms):
                        # Records already fetched into the old consumer's queue are fetched again
                        # from next_offset: nothing is skipped and nothing is delivered twice.
                        new_wait = min(int(wait_ms * _FETCH_WAIT_STEP), max_wait_ms)
                        log.info("reading %s: %d records in %.1fs at fetch.wait.max.ms=%d (next offset %d); "
                                 "fetching with %d ms from here", where, window_records, window_s, wait_ms,
                                 next_offset, new_wait)
                        consumer.close()
                        wait_ms = new_wait
                        consumer = _range_consumer(config, wait_ms, rng.topic, rng.partition, next_offset)
                    window_start, window_records = time.monotonic(), 0
            if len(pending) >= batch_size or (done and pending):
                paused = time.monotonic()
                yield pending
                pending = []
                window_start += time.monotonic() - paused  # the caller's time is not the broker's
        if wait_ms > max(configured_ms, _range_waits.get(key, 0)):
            _range_waits[key] = wait_ms  # a later read of this partition starts there
    finally:
        try:
            consumer.close()
        except RuntimeError:  # closed by an escalation whose new consumer failed to start
            pass


def _fetch_wait_too_short(records: int, window_s: float, wait_ms: int) -> bool:
    """A window of a range read yielded fewer than ``_MIN_RECORDS_PER_FETCH`` records per fetch wait.

    On Tansu each fetch lasts about the wait, so that is a broker answering mostly empty fetches. On
    Kafka a read this slow is bandwidth-bound and a longer wait only delays the EOF at a range that
    ends on a transaction marker.
    """
    return records < _MIN_RECORDS_PER_FETCH * window_s * 1000 / wait_ms


def _range_consumer(config: Mapping[str, Any], wait_ms: int, topic: str, partition: int, offset: int) -> Consumer:
    consumer = Consumer({**config, "fetch.wait.max.ms": wait_ms})
    consumer.assign([TopicPartition(topic, partition, offset)])
    return consumer


def _end_below_range(where: str, end: int, fail_on_data_loss: bool) -> None:
    msg = f"data loss reading {where}: the partition ends at {end}, before the end of the range"
    if fail_on_data_loss:
        raise DataLossError(msg + ". Set failOnDataLoss=false to continue.")
    log.warning("%s; failOnDataLoss=false, skipping the rest of the range", msg)
