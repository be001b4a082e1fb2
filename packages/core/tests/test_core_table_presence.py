"""An optional framework table looked up once, warned about once when missing, and found again
once it appears (no restart)."""

from __future__ import annotations

import sqlalchemy as sa

from ekbatan.core.migrations import TablePresence


def test_a_missing_table_is_reported_once_and_found_once_created(tmp_path):
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'presence.sqlite'}")
    table = sa.Table("later_table", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
    waiting, eager = TablePresence(), TablePresence(recheck_missing=0.0)
    try:
        with engine.connect() as connection:
            assert waiting.exists(connection, table) == (False, True)  # missing: warn now
            assert waiting.exists(connection, table) == (False, False)  # remembered: no second warning
            assert eager.exists(connection, table) == (False, True)
        table.create(engine)
        with engine.connect() as connection:
            assert waiting.exists(connection, table) == (False, False), "looked for again only after a while"
            assert eager.exists(connection, table) == (True, False)
            assert eager.exists(connection, table) == (True, False)
    finally:
        engine.dispose()
