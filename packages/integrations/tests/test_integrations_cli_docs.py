"""docs/cli.md shows what the commands print: each ```text block that starts with ``$ ekbatan``
is run, in the page's order, on one SQLite application, and its output compared with the block.

Times near now, ages and the SQLite version differ from run to run; both sides have them
replaced by placeholders (and runs of spaces collapsed, since a placeholder changes a column's
width) before the comparison. ``ekbatan worker`` blocks run until a signal and are left out here
(the worker's own test runs it as a process).
"""

from __future__ import annotations

import json
import re
import shlex
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
import yaml
from click.testing import CliRunner
from integrations_support import notification_row

from ekbatan.core.migrations import eventlog_tables
from ekbatan.distributed_jobs.scheduler import ErrorRecord, HoldState, SchedulerClient
from ekbatan.distributed_jobs.scheduler._history.table import HistoryTable
from ekbatan.distributed_jobs.scheduler._table.rows import NewExecution
from ekbatan.integrations.cli import main
from ekbatan.local_event_handler import notifications_table

PAGE = Path(__file__).resolve().parents[3] / "docs" / "cli.md"
EXAMPLE = re.compile(r"^```text\n(\$ ekbatan [^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)

_VARYING = [
    (re.compile(r"\b20(?!3[01])\d\d-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|\+00:00)"), "<now>"),
    (re.compile(r"\b\d+[smhd](?: \d\d[smh])?\b"), "<age>"),
    (re.compile(r"sqlite \d+\.\d+\.\d+"), "sqlite <version>"),
    (re.compile(r'"(oldest_age_seconds|oldest_open_age_seconds)": [\d.]+'), r'"\1": <age>'),
    (re.compile(r"ekbatan worker \d+"), "ekbatan worker <pid>"),
]


def normalise(text: str) -> str:
    for pattern, placeholder in _VARYING:
        text = pattern.sub(placeholder, text)
    return "\n".join(" ".join(line.split()) for line in text.strip().splitlines())


def application(directory: Path) -> None:
    url = "sqlite:///app.sqlite"
    document = {
        "ekbatan": {
            "namespace": "shop",
            "sharding": {
                "default-shard": {"group": 0, "member": 0},
                "groups": [
                    {
                        "group": 0,
                        "name": "global",
                        "members": [
                            {
                                "member": 0,
                                "configs": {
                                    "primary-config": {"url": url},
                                    "jobs-config": {"url": url, "maximum-pool-size": 2},
                                },
                            }
                        ],
                    }
                ],
            },
        }
    }
    (directory / "application.yml").write_text(yaml.safe_dump(document, sort_keys=False), "utf-8")
    document["ekbatan"]["jobs"] = {"polling-intervl": "PT5S"}  # a typo, for the error example
    (directory / "broken.yml").write_text(yaml.safe_dump(document, sort_keys=False), "utf-8")


def seed(url: str) -> None:
    """What an application would have written: a few executions, events and notifications."""
    engine = sa.create_engine(url)
    try:
        client = SchedulerClient(engine)
        rows = [
            (
                "send-invoice",
                "order-1001",
                datetime(2030, 1, 1, 9, tzinfo=UTC),
                {"order": 1001, "copy": False},
            ),
            (
                "send-invoice",
                "order-1002",
                datetime(2030, 1, 1, 9, 5, tzinfo=UTC),
                {"order": 1002, "copy": True},
            ),
            ("nightly-report", "recurring", datetime(2030, 1, 1, 2, tzinfo=UTC), None),
        ]
        for task, instance, when, data in rows:
            raw = None if data is None else json.dumps(data).encode()
            client.repository.create_if_not_exists(NewExecution(task, instance, when, raw))
        report = client.get_scheduled_execution(("nightly-report", "recurring")).execution
        client.repository.reschedule(
            report,
            report.execution_time,
            last_success=datetime(2029, 12, 30, 2, 0, 3, tzinfo=UTC),
            last_failure=datetime(2029, 12, 31, 2, 0, 9, tzinfo=UTC),
            consecutive_failures=1,
        )
        now = datetime.now(UTC)
        client.repository.create_if_not_exists(
            NewExecution("import-prices", "feed-7", now, b"\x80\x04K\x07.")
        )
        client.repository.pick(client.get_scheduled_execution(("import-prices", "feed-7")).execution, now)
        client.repository.create_if_not_exists(NewExecution("send-receipt", "order-1045", now, b"{}"))
        receipt = client.get_scheduled_execution(("send-receipt", "order-1045")).execution
        error = "mail server refused the receipt of order-1045"
        runs = [
            ("order-0998", "succeeded", 8, 80, None),
            ("order-0999", "failed", 9, 1450, "mail server timed out"),
            ("order-1000", "succeeded", 10, 120, None),
        ]
        HistoryTable(client.repository).insert(
            [
                HistoryTable(client.repository).encode(
                    {
                        "task_name": "send-invoice", "task_instance": instance, "picked_by": "worker-1",
                        "execution_time": datetime(2030, 1, 1, hour, tzinfo=UTC), "version": 2,
                        "started": datetime(2030, 1, 1, hour, tzinfo=UTC),
                        "finished": datetime(2030, 1, 1, hour, tzinfo=UTC) + timedelta(milliseconds=took),
                        "duration_ms": took, "result": result, "attempt": 1,
                        "error_class": None if message is None else "TimeoutError", "error_message": message,
                        "error_traceback": None, "task_data": None,
                    }
                )
                for instance, result, hour, took, message in runs
            ]
        )  # fmt: skip
        client.repository.hold(
            receipt.with_changes(consecutive_failures=3),
            HoldState.DEAD,
            now=now,
            by="worker-1",
            error=ErrorRecord(
                "ConnectionError", error, f"Traceback (most recent call last):\nConnectionError: {error}\n"
            ),
        )
        tables = eventlog_tables("sqlite")
        shared = {"namespace": "shop", "action_name": "PlaceOrder", "action_params": {}, "started_date": now,
                  "completion_date": now, "payload": {}, "event_type": "OrderPlaced"}  # fmt: skip
        with engine.begin() as connection:
            connection.execute(
                tables.events.insert(),
                [
                    {
                        **shared,
                        "id": uuid.uuid4(),
                        "action_id": uuid.uuid4(),
                        "event_date": now - timedelta(seconds=age),
                        "delivered": False,
                    }
                    for age in (42, 7)
                ],
            )
            states = [("mail-receipt", "SUCCEEDED", 1)] * 3 + [
                ("mail-receipt", "FAILED", 2),
                ("audit", "EXPIRED", 5),
            ]
            connection.execute(
                notifications_table("sqlite").insert(),
                [
                    notification_row(
                        handler,
                        state,
                        event_date=now - timedelta(seconds=95),
                        at=now,
                        attempts=attempts,
                        **shared,
                    )
                    for handler, state, attempts in states
                ],
            )
    finally:
        engine.dispose()


def test_the_outputs_shown_in_docs_cli_md(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EKBATAN_CONFIG", raising=False)
    application(tmp_path)
    examples = EXAMPLE.findall(PAGE.read_text("utf-8"))
    assert len(examples) >= 10, "docs/cli.md lost its examples"
    seeded = False
    for command_line, shown in examples:
        args = shlex.split(command_line)[2:]
        if args[0] == "worker":
            continue
        # The error examples name their own target; the others need the application's rows.
        if args[0] != "migrate" and not {"--url", "--config"} & set(args) and not seeded:
            seed("sqlite:///app.sqlite")
            seeded = True
        result = CliRunner().invoke(main, args, prog_name="ekbatan")
        assert normalise(result.output) == normalise(shown), f"{command_line}\n{result.output}"
