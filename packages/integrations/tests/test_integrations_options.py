"""EkbatanOptions: one options type for every entry point."""

from __future__ import annotations

import dataclasses
import typing
import uuid
from decimal import Decimal

import pytest
import sqlalchemy as sa
from integrations_sample.domain import Deposit, DepositParams, Wallet
from integrations_support import application_yml, sqlite_with_wallets

from ekbatan.core import DatabaseRegistry, JobsPoolNotConfiguredError, migrate
from ekbatan.distributed_jobs import JobsDatabaseUnavailableError
from ekbatan.integrations import build_runtime
from ekbatan.integrations.options import EkbatanOptions, OptionFields
from ekbatan.integrations.runtime import load

UNREACHABLE_URL = "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"


def test_every_option_but_config_and_packages_is_a_keyword_of_every_entry_point():
    fields = {f.name for f in dataclasses.fields(EkbatanOptions)}
    keywords = set(typing.get_type_hints(OptionFields))
    assert keywords == fields - {"config", "packages"}


def test_keywords_given_beside_options_win_and_none_keeps_what_the_options_say():
    base = EkbatanOptions(config="base.yml", packages=("shop",), require_database=False)
    merged = EkbatanOptions.of(base, config=None, packages="a.jobs, b.handlers", migrate_on_start=True)
    assert merged.config == "base.yml"
    assert merged.packages == ("a.jobs", "b.handlers")
    assert (merged.migrate_on_start, merged.require_database) == (True, False)
    assert EkbatanOptions.of(base, require_database=True).require_database is True


def test_a_mapping_such_as_flask_config_gives_options_with_flags_as_strings():
    opts = EkbatanOptions.from_mapping(
        {
            "EKBATAN_OPTIONS": EkbatanOptions(packages=("shop",)),
            "EKBATAN_CONFIG": "app.yml",
            "EKBATAN_MIGRATE_ON_START": "yes",
            "EKBATAN_REQUIRE_DATABASE": "false",
            "UNRELATED": 1,
        }
    )
    assert (opts.config, opts.packages, opts.migrate_on_start, opts.require_database) == (
        "app.yml",
        ("shop",),
        True,
        False,
    )
    with pytest.raises(
        ValueError, match="EKBATAN_REQUIRE_DATABASE is a flag: write true or false, not 'maybe'"
    ):
        EkbatanOptions.from_mapping({"EKBATAN_REQUIRE_DATABASE": "maybe"})


def test_mistakes_are_named():
    with pytest.raises(TypeError, match=r"unknown Ekbatan option\(s\) \['requires_database'\]"):
        EkbatanOptions().replace(requires_database=False)
    with pytest.raises(TypeError, match="require_database is True or False"):
        EkbatanOptions(require_database="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="customize_scheduler takes a function"):
        EkbatanOptions(customize_scheduler=8)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="options must be an EkbatanOptions"):
        EkbatanOptions.of({"config": "x"})  # type: ignore[arg-type]


def _registry_of_its_own(tmp_path) -> tuple[DatabaseRegistry, str]:
    """A registry the application built on a SQLite file of its own, with the sample's tables
    and the eventlog's."""
    directory = tmp_path / "mine"
    directory.mkdir()
    url = sqlite_with_wallets(directory)
    settings = load(str(application_yml(directory, url)))
    migrate(settings)
    return DatabaseRegistry.from_config(settings), url


def test_a_database_registry_given_is_the_one_the_runtime_uses_and_it_stays_open(tmp_path):
    registry, _ = _registry_of_its_own(tmp_path)
    # the settings lead elsewhere: a deposit in the registry's file is the registry's doing
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'settings.sqlite'}", handling=False)
    try:
        runtime = build_runtime(str(config), ["integrations_sample.domain"], database_registry=registry)
        wallet = uuid.uuid4()
        with runtime:
            assert runtime.database_registry is registry
            runtime.action_executor.execute(Deposit(), DepositParams(wallet_id=wallet, amount=Decimal(3)))
        assert not runtime.started
        assert not registry.primary().closed, "the runtime closed the application's registry"
        with registry.transaction() as connection:
            assert connection.execute(sa.select(Wallet.id)).scalars().all() == [wallet]
    finally:
        registry.close()


def test_a_failed_build_or_start_leaves_a_given_database_registry_open(tmp_path):
    registry, _ = _registry_of_its_own(tmp_path)
    try:
        without_jobs_pool = application_yml(tmp_path, f"sqlite:///{tmp_path / 'a.sqlite'}", jobs_pool=False)
        with pytest.raises(JobsPoolNotConfiguredError):
            build_runtime(str(without_jobs_pool), ["integrations_sample.jobs"], database_registry=registry)
        assert not registry.primary().closed

        unreachable = tmp_path / "unreachable"
        unreachable.mkdir()
        runtime = build_runtime(
            str(application_yml(unreachable, UNREACHABLE_URL)),
            ["integrations_sample.jobs"],
            database_registry=registry,
        )
        with pytest.raises(JobsDatabaseUnavailableError), runtime:
            pass
        assert runtime.jobs_pool is not None and runtime.jobs_pool.closed  # its own pool is closed
        assert not registry.primary().closed
    finally:
        registry.close()


def test_a_database_registry_option_of_another_type_is_refused_naming_the_type(tmp_path):
    with pytest.raises(TypeError, match=r"EkbatanOptions\.database_registry takes a DatabaseRegistry"):
        EkbatanOptions(database_registry=load(str(application_yml(tmp_path, "sqlite://"))))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"database_registry takes a DatabaseRegistry.*got 'shop\.db'"):
        build_runtime(database_registry="shop.db")  # type: ignore[arg-type]
