"""EkbatanOptions: one options type for every entry point."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from ekbatan.integrations.options import EkbatanOptions, OptionFields


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
