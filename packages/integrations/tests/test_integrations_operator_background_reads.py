"""The overview's table-wide counts on big tables: read in the request while fast; once slow,
served from the last reading (labelled with its age on the page) and read again on a thread of
its own, one at a time and spaced by its duration."""

from __future__ import annotations

import re
import threading
from datetime import UTC, datetime, timedelta

import pytest
from starlette.testclient import TestClient

from ekbatan.distributed_jobs.scheduler import SchedulerClient, TaskInstance, create_table
from ekbatan.integrations.operator import background_reads, operator_app
from ekbatan.integrations.operator.background_reads import BackgroundRead
from testsupport import wait_until


class Source:
    """A reading that counts its calls and, when asked, waits for the test to let it finish."""

    def __init__(self) -> None:
        self.calls = 0
        self.hold = threading.Event()
        self.hold.set()
        self.fail = False

    def read(self, _source: object) -> int:
        self.calls += 1
        call = self.calls
        assert self.hold.wait(10), "the test never let the read finish"
        if self.fail:
            raise RuntimeError("the database went away")
        return call


def test_fast_reads_are_done_in_each_request():
    source = Source()
    reads = BackgroundRead(source.read, fast=60.0)
    first, second = reads.get(source), reads.get(source)
    assert (first.value, first.cached, second.value, second.cached) == (1, False, 2, False)
    assert first.interval == 0.0


def test_slow_reads_are_served_from_the_last_one_and_read_again_behind_one_at_a_time():
    source = Source()
    reads = BackgroundRead(source.read, fast=0.0, min_interval=0.0, spacing=0.0)
    first = reads.get(source)  # nothing read yet: read now, whatever it costs
    assert (first.value, first.cached) == (1, False)
    source.hold.clear()
    second = reads.get(source)  # slow: the last reading, and a read started behind
    assert (second.value, second.cached) == (1, True)
    wait_until(lambda: source.calls == 2, timeout=5, message="a read behind the request")
    third = reads.get(source)  # one read behind at a time
    assert (third.value, third.cached, source.calls) == (1, True, 2)
    source.hold.set()
    wait_until(lambda: reads.get(source).value == 2, timeout=5, message="the read behind kept")


def test_a_failed_read_behind_keeps_the_last_reading_and_is_counted():
    source = Source()
    reads = BackgroundRead(source.read, fast=0.0, min_interval=0.0, spacing=0.0)
    assert reads.get(source).value == 1
    source.fail = True
    assert reads.get(source).value == 1
    wait_until(lambda: reads.failures == 1, timeout=5, message="the failed read counted")
    assert reads.get(source).value == 1


def test_a_first_read_longer_than_the_wait_is_shown_as_counting_until_it_ends():
    source = Source()
    source.hold.clear()
    reads = BackgroundRead(source.read, first_wait=0.05)
    assert reads.get(source) is None  # still counting: the page says so
    assert reads.get(source) is None and source.calls == 1  # one first read, not one per request
    source.hold.set()
    first = wait_until(lambda: reads.get(source), timeout=5, message="the first read kept")
    assert (first.value, source.calls) == (1, 1)


def test_a_first_read_done_before_the_page_asks_is_shown_as_read_now():
    """The page's two readings start together; the one that ends first is still this
    request's own reading, not an earlier one (no "read 0 s ago" label)."""
    source = Source()
    reads = BackgroundRead(source.read, fast=0.0, min_interval=3600.0)
    reads.begin(source)
    wait_until(lambda: reads._idle.is_set(), timeout=5, message="the first read ended")
    first = reads.get(source)
    assert first is not None and (first.value, first.cached) == (1, False)
    again = reads.get(source)  # later requests: the last reading, said to be one
    assert again is not None and (again.value, again.cached, source.calls) == (1, True, 1)


def test_a_first_read_that_fails_is_said_by_the_request_that_finds_it_then_read_again():
    source = Source()
    source.fail = True
    reads = BackgroundRead(source.read, first_wait=None)  # wait for it: as a read in the request
    with pytest.raises(RuntimeError, match="the database went away"):
        reads.get(source)
    source.fail = False
    assert reads.get(source).value == 2


def test_a_new_source_is_read_afresh():
    source, other = Source(), Source()
    reads = BackgroundRead(lambda s: s.read(s), fast=0.0, min_interval=3600.0)
    assert reads.get(source).value == 1
    fresh = reads.get(other)
    assert (fresh.value, fresh.cached, other.calls) == (1, False, 1)


def test_slow_reads_are_spaced_by_their_duration():
    reads = BackgroundRead(lambda s: 0, fast=0.1, min_interval=5.0, spacing=10.0)
    assert reads._interval(0.05) == 0.0  # fast: every request reads
    assert reads._interval(0.2) == 5.0  # the least interval
    assert reads._interval(0.8) == pytest.approx(8.0)  # ten times the read


@pytest.mark.dialects("postgres")
def test_the_overview_says_how_old_counts_read_behind_are(database, monkeypatch):
    monkeypatch.setattr(background_reads, "FAST", 0.0)  # every count counts as slow here
    monkeypatch.setattr(background_reads, "MIN_INTERVAL", 3600.0)  # and is not read again
    engine = database.engine()
    create_table(engine)
    client = SchedulerClient(engine)
    client.schedule(TaskInstance("mail", "m-1"), datetime.now(UTC) + timedelta(hours=1))
    with TestClient(operator_app(client, live="off")) as web:
        first = web.get("/").text
        assert 'data-task="mail"' in first and "data-counted-age" not in first  # read now
        client.schedule(TaskInstance("archive", "a-1"), datetime.now(UTC) + timedelta(hours=1))
        second = web.get("/").text
    # the counts of the first read, said to be so
    assert 'data-task="archive"' not in second
    age = re.search(r'data-counted-age="([\d.]+)"', second)
    assert age is not None and float(age.group(1)) < 60
    assert "counted again in the background, at most every 3600" in second


@pytest.mark.dialects("postgres")
@pytest.mark.shipped_first_wait
def test_an_overview_whose_first_count_is_slow_says_it_is_counting_then_shows_the_counts(database):
    engine = database.engine()
    create_table(engine)
    client = SchedulerClient(engine)
    client.schedule(TaskInstance("mail", "m-1"), datetime.now(UTC) + timedelta(hours=1))
    with TestClient(operator_app(client, live="poll")) as web:
        # another session holds the history: the first read of its day waits for it, as a big
        # table's would (the page's other reads, along indexes, go on)
        with engine.connect() as blocker:
            blocker.exec_driver_sql("LOCK TABLE scheduled_tasks_history IN ACCESS EXCLUSIVE MODE")
            waiting = web.get("/")
            assert waiting.status_code == 200
            assert 'id="counting"' in waiting.text and 'data-task="mail"' not in waiting.text
            assert "fills in by itself" in waiting.text
            blocker.rollback()

        def with_counts() -> str | None:
            page = web.get("/").text
            return page if 'data-task="mail"' in page else None

        counted = wait_until(with_counts, timeout=10, message="the counts once the first read ended")
    assert 'id="counting"' not in counted
