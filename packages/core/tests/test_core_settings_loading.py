import logging
import textwrap
from datetime import timedelta

import pytest

from ekbatan.core import EkbatanSettings, SettingsError, load_settings

SHARDING = """
  sharding:
    default-shard: {group: 0, member: 0}
    groups:
      - group: 0
        name: global
        members:
          - member: 0
            configs:
              primary-config:
                url: postgresql+psycopg://app@db:5432/app
                password: "${DB_PASSWORD:}"
"""


def write(tmp_path, text):
    path = tmp_path / "application.yml"
    path.write_text(textwrap.dedent(text))
    return path


def load(tmp_path, text, **environ):
    return load_settings(write(tmp_path, text), environ=environ)


def problems(tmp_path, text, **environ):
    with pytest.raises(SettingsError) as raised:
        load(tmp_path, text, **environ)
    return str(raised.value)


def test_kebab_case_tree_binds(tmp_path):
    settings = load(
        tmp_path,
        """
        ekbatan:
          namespace: wallet
          jobs:
            polling-interval: PT1S
            heartbeat-interval: PT0.5S
            shutdown-max-wait: PT0S
          local-event-handler:
            fanout-poll-delay: PT0.2S
            fanout-batch-size: 50
            handling-poll-delay: PT0.3S
            handling-batch-size: 20
            handling-max-backoff-cap: PT10S
            handling-retention-window: PT24H
            handling:
              enabled: true
          sharding:
            default-shard: {group: 1, member: 0}
            groups:
              - group: 0
                name: global
                members:
                  - member: 0
                    name: global-eu-1
                    configs:
                      primary-config: {url: "sqlite:///a.sqlite"}
                      jobs-config: {url: "sqlite:///a.sqlite", maximum-pool-size: 2}
              - group: 1
                name: mexico
                members:
                  - member: 0
                    configs:
                      primary-config: {jdbc-url: "jdbc:postgresql://mx:5432/app", username: app, password: pw}
                      secondary-config: {jdbc-url: "jdbc:postgresql://mx-replica:5432/app", username: app}
                      lock-config: {url: "postgresql+psycopg://app@mx/app", leak-detection-threshold: 0}
        """,
    )
    assert settings.namespace == "wallet"
    assert settings.jobs.polling_interval == timedelta(seconds=1)
    assert settings.jobs.heartbeat_interval == timedelta(milliseconds=500)
    assert settings.jobs.shutdown_max_wait == timedelta(0)
    leh = settings.local_event_handler
    assert (leh.fanout_poll_delay, leh.fanout_batch_size) == (timedelta(milliseconds=200), 50)
    assert (leh.handling_poll_delay, leh.handling_batch_size) == (timedelta(milliseconds=300), 20)
    assert leh.handling_max_backoff_cap == timedelta(seconds=10)
    assert leh.handling_retention_window == timedelta(hours=24)
    assert leh.handling.enabled is True
    assert settings.sharding.default.group == 1
    global_member = settings.sharding.groups[0].members[0]
    assert global_member.name == "global-eu-1"
    assert global_member.config_for("jobs_config").maximum_pool_size == 2
    mexico = settings.sharding.groups[1].members[0]
    assert set(mexico.configs) == {"primary_config", "secondary_config", "lock_config"}
    assert mexico.primary_config.dialect == "postgresql"
    assert mexico.secondary_config.username == "app"


def test_camel_case_tree_binds(tmp_path):
    settings = load(
        tmp_path,
        """
        ekbatan:
          jobs: {pollingInterval: PT2S, heartbeatInterval: PT3S, shutdownMaxWait: PT4S}
          localEventHandler:
            fanoutPollDelay: PT1S
            handlingBatchSize: 7
            handling: {enabled: false}
          sharding:
            defaultShard: {group: 0, member: 0}
            groups:
              - group: 0
                name: global
                members:
                  - member: 0
                    configs:
                      primaryConfig: {jdbcUrl: "jdbc:mariadb://db:3306/app", username: app, maximumPoolSize: 20}
                      jobsConfig: {url: "mariadb+pymysql://app@db/app", maximumPoolSize: 5, minimumIdle: 1}
        """,
    )
    assert settings.jobs.polling_interval == timedelta(seconds=2)
    assert settings.jobs.shutdown_max_wait == timedelta(seconds=4)
    assert settings.local_event_handler.handling_batch_size == 7
    member = settings.sharding.groups[0].members[0]
    assert member.primary_config.maximum_pool_size == 20
    assert member.primary_config.dialect == "mariadb"
    assert member.config_for("jobs_config").minimum_idle == 1


def test_mixed_spellings_bind_and_config_for_accepts_every_spelling(tmp_path):
    settings = load(
        tmp_path,
        """
        ekbatan:
          localEventHandler:
            handling-batch-size: 9
          jobs: {polling-interval: PT1S, heartbeatInterval: PT2S}
          sharding:
            default-shard: {group: 0, member: 0}
            groups:
              - group: 0
                name: global
                members:
                  - member: 0
                    configs:
                      primaryConfig: {url: "sqlite:///x.sqlite", maximum-pool-size: 3}
                      jobs-config: {url: "sqlite:///x.sqlite", maximumPoolSize: 1}
                      primary-eu-west-1: {url: "sqlite:///y.sqlite"}
        """,
    )
    assert settings.local_event_handler.handling_batch_size == 9
    assert settings.jobs.heartbeat_interval == timedelta(seconds=2)
    member = settings.sharding.groups[0].members[0]
    assert (
        member.config_for("jobs_config")
        is member.config_for("jobs-config")
        is member.config_for("jobsConfig")
    )
    assert member.config_for("primaryEuWest1") is member.config_for("primary-eu-west-1") is not None
    assert "primary_eu_west1" in member.configs


def test_absent_sections_take_defaults_and_unset_knobs_stay_unset(tmp_path):
    settings = load(tmp_path, "ekbatan:\n  jobs:\n  local-event-handler:\n" + SHARDING)
    assert settings.namespace == "default"
    assert settings.jobs.polling_interval is None
    assert settings.jobs.heartbeat_interval is None
    assert settings.local_event_handler.fanout_batch_size is None
    assert settings.local_event_handler.handling.enabled is False


def test_keys_outside_ekbatan_are_not_ours(tmp_path):
    settings = load(tmp_path, "server: {port: 8080}\nspring: whatever\nekbatan:" + SHARDING)
    assert isinstance(settings, EkbatanSettings)


def test_numeric_strings_are_coerced(tmp_path):
    text = "ekbatan:" + SHARDING.replace(
        "password:", 'maximum-pool-size: "${POOL:7}"\n                password:'
    )
    settings = load(tmp_path, text)
    assert settings.sharding.groups[0].members[0].primary_config.maximum_pool_size == 7


# --- placeholders ---------------------------------------------------------------------------


def test_placeholders_resolve_from_the_environment_with_and_without_defaults(tmp_path):
    settings = load(
        tmp_path,
        """
        ekbatan:
          namespace: ${NS:fallback_ns}
          jobs: {polling-interval: "${POLL}"}
          sharding:
            default-shard: {group: 0, member: 0}
            groups:
              - group: 0
                name: ${GROUP_NAME:global}
                members:
                  - member: 0
                    configs:
                      primary-config:
                        url: "postgresql+psycopg://app@${DB_HOST:localhost}:5432/app"
                        password: ${DB_PASSWORD}
                        username: "$${literal}"
        """,
        POLL="PT3S",
        DB_HOST="db.internal",
        DB_PASSWORD="",
    )
    assert settings.namespace == "fallback_ns"
    assert settings.jobs.polling_interval == timedelta(seconds=3)
    config = settings.sharding.groups[0].members[0].primary_config
    assert config.sqlalchemy_url().host == "db.internal"
    assert config.password.get_secret_value() == ""  # set but empty stays empty
    assert config.username == "${literal}"


def test_a_missing_variable_without_default_names_the_variable_and_the_key(tmp_path):
    message = problems(tmp_path, "ekbatan:" + SHARDING.replace("${DB_PASSWORD:}", "${DB_PASSWORD}"))
    assert "ekbatan.sharding.groups[0].members[0].configs.primary-config.password" in message
    assert "DB_PASSWORD is not set" in message
    assert "${DB_PASSWORD:default}" in message


def test_an_unterminated_placeholder_is_an_error(tmp_path):
    message = problems(tmp_path, "ekbatan:\n  namespace: '${NS'\n" + SHARDING)
    assert "ekbatan.namespace" in message
    assert "unterminated" in message


# --- environment overrides ------------------------------------------------------------------


def test_environment_overrides_file_values_including_list_indices(tmp_path):
    settings = load(
        tmp_path,
        "ekbatan:\n  jobs: {polling-interval: PT10S}\n" + SHARDING,
        EKBATAN_JOBS_POLLING_INTERVAL="PT1S",
        EKBATAN_SHARDING_GROUPS_0__MEMBERS_0__CONFIGS_PRIMARYCONFIG_PASSWORD="from-env",
        EKBATAN_SHARDING_GROUPS_0__MEMBERS_0__CONFIGS_PRIMARY_CONFIG_MAXIMUM_POOL_SIZE="4",
        EKBATAN_NAMESPACE="orders",
        EKBATAN_TEST_PG="not ours: ignored",
    )
    assert settings.jobs.polling_interval == timedelta(seconds=1)
    assert settings.namespace == "orders"
    config = settings.sharding.groups[0].members[0].primary_config
    assert config.password.get_secret_value() == "from-env"
    assert config.maximum_pool_size == 4


def test_environment_can_supply_keys_the_file_does_not_have(tmp_path):
    settings = load(
        tmp_path,
        "ekbatan:" + SHARDING,
        EKBATAN_JOBS_HEARTBEATINTERVAL="PT2S",
        EKBATAN_LOCAL_EVENT_HANDLER_HANDLING_ENABLED="true",
        EKBATAN_SHARDING_GROUPS_0__MEMBERS_0__CONFIGS_JOBS_CONFIG_URL="sqlite:///jobs.sqlite",
        EKBATAN_SHARDING_GROUPS_0__MEMBERS_0__CONFIGS_JOBS_CONFIG_MAXIMUM_POOL_SIZE="2",
        EKBATAN_SHARDING_GROUPS_0__MEMBERS_0__CONFIGS_PRIMARY_CONFIG_PASSWORD="",
        DB_PASSWORD="from-file-placeholder",
    )
    assert settings.sharding.groups[0].members[0].primary_config.password.get_secret_value() == ""
    assert settings.jobs.heartbeat_interval == timedelta(seconds=2)
    assert settings.local_event_handler.handling.enabled is True
    jobs = settings.sharding.groups[0].members[0].config_for("jobs_config")
    assert jobs.url == "sqlite:///jobs.sqlite"
    assert jobs.maximum_pool_size == 2


def test_an_environment_variable_that_names_no_key_is_an_error_naming_it(tmp_path):
    message = problems(tmp_path, "ekbatan:" + SHARDING, EKBATAN_JOBS_POLING_INTERVAL="PT1S")
    assert "EKBATAN_JOBS_POLING_INTERVAL" in message
    assert "names no settings key" in message


def test_an_invalid_value_from_the_environment_says_where_it_came_from(tmp_path):
    message = problems(tmp_path, "ekbatan:" + SHARDING, EKBATAN_JOBS_POLLING_INTERVAL="10s")
    assert "ekbatan.jobs.polling-interval" in message
    assert "'10s'" in message and "PT10S" in message
    assert "EKBATAN_JOBS_POLLING_INTERVAL" in message


# --- rejections -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [("10s", "PT10S"), ("200ms", "PT0.2S"), ("10", "PT10S"), ("'00:00:10'", "PT10S"), ("1:30", "PT1H30M")],
)
def test_shorthand_durations_are_rejected_naming_key_value_and_iso_form(tmp_path, value, expected):
    message = problems(tmp_path, f"ekbatan:\n  jobs: {{polling-interval: {value}}}\n" + SHARDING)
    assert "ekbatan.jobs.polling-interval" in message
    assert value.strip("'") in message
    assert expected in message


def test_rejections_quote_the_key_as_the_user_spelled_it(tmp_path):
    message = problems(tmp_path, "ekbatan:\n  localEventHandler: {handlingPollDelay: 5m}\n" + SHARDING)
    assert "ekbatan.localEventHandler.handlingPollDelay" in message
    assert "PT5M" in message


@pytest.mark.parametrize("value", ["PT0S", "PT-1S", "PT-10M"])
def test_non_positive_polling_interval_is_rejected_mentioning_the_tight_loop(tmp_path, value):
    message = problems(tmp_path, f"ekbatan:\n  jobs: {{polling-interval: {value}}}\n" + SHARDING)
    assert "ekbatan.jobs.polling-interval" in message
    assert "tight loop" in message
    assert value in message


@pytest.mark.parametrize("value", ["PT0S", "PT-1S"])
def test_non_positive_heartbeat_is_rejected(tmp_path, value):
    message = problems(tmp_path, f"ekbatan:\n  jobs: {{heartbeat-interval: {value}}}\n" + SHARDING)
    assert "ekbatan.jobs.heartbeat-interval" in message
    assert value in message


def test_shutdown_wait_may_be_zero_but_not_negative(tmp_path):
    assert load(
        tmp_path, "ekbatan:\n  jobs: {shutdown-max-wait: PT0S}\n" + SHARDING
    ).jobs.shutdown_max_wait == (timedelta(0))
    message = problems(tmp_path, "ekbatan:\n  jobs: {shutdown-max-wait: PT-1S}\n" + SHARDING)
    assert "ekbatan.jobs.shutdown-max-wait" in message
    assert "PT-1S" in message


@pytest.mark.parametrize("spelling", ["missed-heartbeats-limit", "missedHeartbeatsLimit"])
def test_missed_heartbeats_limit_loads(tmp_path, spelling):
    settings = load(tmp_path, f"ekbatan:\n  jobs: {{{spelling}: 8}}\n" + SHARDING)
    assert settings.jobs.missed_heartbeats_limit == 8
    assert (
        load(
            tmp_path, "ekbatan:\n  jobs: {missed-heartbeats-limit: 4}\n" + SHARDING
        ).jobs.missed_heartbeats_limit
        == 4
    )
    assert load(tmp_path, "ekbatan:" + SHARDING).jobs.missed_heartbeats_limit is None
    overridden = load(tmp_path, "ekbatan:" + SHARDING, EKBATAN_JOBS_MISSED_HEARTBEATS_LIMIT="12")
    assert overridden.jobs.missed_heartbeats_limit == 12


@pytest.mark.parametrize("value", [3, 0, -6])
def test_missed_heartbeats_limit_below_four_is_refused_naming_the_value_and_the_minimum(tmp_path, value):
    message = problems(tmp_path, f"ekbatan:\n  jobs: {{missed-heartbeats-limit: {value}}}\n" + SHARDING)
    assert "ekbatan.jobs.missed-heartbeats-limit" in message
    assert f"must be at least 4, got {value}" in message


def test_missed_heartbeats_limit_must_be_a_whole_number(tmp_path):
    message = problems(tmp_path, "ekbatan:\n  jobs: {missed-heartbeats-limit: six}\n" + SHARDING)
    assert "ekbatan.jobs.missed-heartbeats-limit" in message


def test_sub_millisecond_positive_polling_is_accepted(tmp_path):
    settings = load(tmp_path, "ekbatan:\n  jobs: {polling-interval: PT0.0005S}\n" + SHARDING)
    assert settings.jobs.polling_interval == timedelta(microseconds=500)


@pytest.mark.parametrize(
    ("snippet", "path"),
    [
        ("jobs: {poling-interval: PT1S}", "ekbatan.jobs.poling-interval"),
        ("localEventHandler: {handling: {enabeld: true}}", "ekbatan.localEventHandler.handling.enabeld"),
        ("sharding-typo: 1", "ekbatan.sharding-typo"),
    ],
)
def test_unknown_keys_fail_with_their_path(tmp_path, snippet, path):
    message = problems(tmp_path, f"ekbatan:\n  {snippet}\n" + SHARDING)
    assert path in message
    assert "unknown key" in message


def test_unknown_key_inside_a_pool_names_the_full_path_and_a_suggestion(tmp_path):
    text = "ekbatan:" + SHARDING.replace("password:", "maximum-pool-sise: 3\n                password:")
    message = problems(tmp_path, text)
    assert "ekbatan.sharding.groups[0].members[0].configs.primary-config.maximum-pool-sise" in message
    assert "maximum-pool-size" in message


def test_missing_sharding_fails(tmp_path):
    message = problems(tmp_path, "ekbatan:\n  namespace: x\n")
    assert "ekbatan.sharding: is required" in message


def test_missing_ekbatan_root_fails(tmp_path):
    assert "top-level 'ekbatan:'" in problems(tmp_path, "sharding: {}\n")


def test_missing_primary_config_is_named(tmp_path):
    text = "ekbatan:" + SHARDING.replace("primary-config:", "jobs-config:")
    message = problems(tmp_path, text)
    assert "ekbatan.sharding.groups[0].members[0].configs" in message
    assert "primary-config is required" in message


def test_default_shard_must_name_a_configured_member(tmp_path):
    message = problems(
        tmp_path, "ekbatan:" + SHARDING.replace("{group: 0, member: 0}", "{group: 0, member: 3}")
    )
    assert "default-shard.member=3" in message


def test_both_spellings_of_one_key_are_refused(tmp_path):
    message = problems(
        tmp_path, "ekbatan:\n  jobs: {polling-interval: PT1S, pollingInterval: PT2S}\n" + SHARDING
    )
    assert "'polling-interval' and 'pollingInterval'" in message


def test_namespace_must_be_a_dotted_identifier(tmp_path):
    message = problems(tmp_path, "ekbatan:\n  namespace: my-service\n" + SHARDING)
    assert "ekbatan.namespace" in message
    assert "'my_service'" in message


def test_every_problem_is_reported_at_once(tmp_path):
    message = problems(
        tmp_path,
        "ekbatan:\n  jobs: {polling-interval: 10s, heartbeat-interval: PT0S}\n  namespace: a-b\n" + SHARDING,
    )
    assert (
        "polling-interval" in message and "heartbeat-interval" in message and "ekbatan.namespace" in message
    )


def test_invalid_yaml_is_reported_with_the_file(tmp_path):
    message = problems(tmp_path, "ekbatan: [unclosed\n")
    assert "application.yml" in message and "not valid YAML" in message


# --- secrets --------------------------------------------------------------------------------


def test_passwords_never_appear_in_repr_str_or_errors(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    text = """
    ekbatan:
      jobs: {polling-interval: 10s}
      sharding:
        default-shard: {group: 0, member: 0}
        groups:
          - group: 0
            name: global
            members:
              - member: 0
                configs:
                  primary-config: {url: "postgresql+psycopg://app:hunter2@db/app", maximum-pool-size: 0}
                  secondary-config: {url: "h2://app:hunter2@db/app"}
                  jobs-config: {jdbc-url: "jdbc:h2:mem:x;password=hunter2"}
                  lock-config: {url: "postgresql+psycopg://app@db/app", password: [hunter2]}
    """
    message = problems(tmp_path, text)
    assert "hunter2" not in message
    assert "maximum-pool-size" in message

    valid = load(
        tmp_path,
        "ekbatan:"
        + SHARDING.replace(
            "url: postgresql+psycopg://app@db", "url: postgresql+psycopg://app:hunter2@db"
        ).replace('password: "${DB_PASSWORD:}"', "minimum-idle: 1"),
        EKBATAN_SHARDING_GROUPS_0__MEMBERS_0__CONFIGS_PRIMARY_CONFIG_USERNAME="app",
    )
    assert "hunter2" not in repr(valid)
    assert "hunter2" not in str(valid)
    config = valid.sharding.groups[0].members[0].primary_config
    assert "hunter2" not in repr(config) and "hunter2" not in config.safe_url()
    assert config.sqlalchemy_url().password == "hunter2"
    assert "hunter2" not in caplog.text


def test_settings_built_in_code_read_nothing_from_the_environment(monkeypatch):
    monkeypatch.setenv("EKBATAN_NAMESPACE", "from_env")
    settings = EkbatanSettings(
        sharding={
            "defaultShard": {"group": 0, "member": 0},
            "groups": [
                {
                    "group": 0,
                    "name": "g",
                    "members": [{"member": 0, "configs": {"primaryConfig": {"url": "sqlite://"}}}],
                }
            ],
        }
    )
    assert settings.namespace == "default"


def test_an_environment_index_past_the_file_list_is_validated_like_any_entry(tmp_path):
    message = problems(tmp_path, "ekbatan:" + SHARDING, EKBATAN_SHARDING_GROUPS_1__NAME="mexico")
    assert "ekbatan.sharding.groups[1].group: is required" in message
    assert "ekbatan.sharding.groups[1].members: is required" in message
