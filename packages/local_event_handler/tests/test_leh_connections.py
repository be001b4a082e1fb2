"""The pipeline's connections: relaxed where it is safe, and handed back to the pool as they were."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from ekbatan.local_event_handler.connections import pipeline_connection


@pytest.mark.dialects("postgres")
def test_postgresql_writes_skip_the_flush_wait_and_the_pool_gets_the_setting_back(one_shard):
    provider = one_shard.manager.primary
    with pipeline_connection(provider) as connection:
        assert connection.exec_driver_sql("SHOW synchronous_commit").scalar_one() == "off"
        assert connection.exec_driver_sql("SHOW enable_bitmapscan").scalar_one() == "off"
    with pipeline_connection(provider, writes=False) as connection:
        assert connection.exec_driver_sql("SHOW synchronous_commit").scalar_one() == "on"
        assert connection.exec_driver_sql("SHOW enable_seqscan").scalar_one() == "off"
    with provider.connect() as connection:  # the application's next use of a pooled connection
        assert connection.exec_driver_sql("SHOW synchronous_commit").scalar_one() == "on"
        assert connection.exec_driver_sql("SHOW enable_seqscan").scalar_one() == "on"
        assert connection.exec_driver_sql("SHOW enable_bitmapscan").scalar_one() == "on"


@pytest.mark.dialects("postgres")
def test_a_failure_inside_leaves_no_relaxed_connection_in_the_pool(one_shard):
    provider = one_shard.manager.primary
    with pytest.raises(sa.exc.DataError), pipeline_connection(provider) as connection:
        connection.exec_driver_sql("SELECT 1/0")
    for _ in range(3):
        with provider.connect() as connection:
            assert connection.exec_driver_sql("SHOW synchronous_commit").scalar_one() == "on"


@pytest.mark.dialects("mariadb", "mysql")
def test_mysql_family_reads_and_writes_at_read_committed(one_shard):
    provider = one_shard.manager.primary
    with pipeline_connection(provider) as connection:
        level = connection.exec_driver_sql("SELECT @@tx_isolation").scalar_one()
        assert level == "READ-COMMITTED"
    with provider.connect() as connection:
        assert connection.exec_driver_sql("SELECT @@tx_isolation").scalar_one() == "REPEATABLE-READ"
