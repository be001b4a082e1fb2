"""scan() and construct(): finding marked classes and building them from a container."""

from __future__ import annotations

import sys
import textwrap

import pytest
from dependency_injector import containers, providers
from integrations_sample.domain import Deposit
from integrations_sample.handlers import DepositCounter, DepositLedger
from integrations_sample.jobs import TopUpJob

from ekbatan.core import ActionExecutor
from ekbatan.integrations.construction import ConstructionError, Offer, construct, offers_of_container
from ekbatan.integrations.discovery import DiscoveryError, scan


def test_scan_finds_marked_classes_where_they_are_defined():
    found = scan(["integrations_sample"])
    assert found.actions == (Deposit,)
    assert found.jobs == (TopUpJob,)
    assert found.handlers == (DepositCounter,)
    assert found.modules == (
        "integrations_sample",
        "integrations_sample.domain",
        "integrations_sample.handlers",
        "integrations_sample.jobs",
    )
    assert scan("integrations_sample.jobs").jobs == (TopUpJob,)  # a module, as a string
    assert not scan([])


def test_scan_order_is_by_module_then_definition(tmp_path, monkeypatch):
    package = tmp_path / "ordered_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "b.py").write_text(
        textwrap.dedent("""
        from ekbatan.distributed_jobs import DistributedJob, distributed_job

        @distributed_job
        class Zeta(DistributedJob):
            pass

        @distributed_job
        class Alpha(DistributedJob):
            pass
        """)
    )
    (package / "a.py").write_text(
        "from ekbatan.distributed_jobs import DistributedJob, distributed_job\n"
        "from ordered_pkg.b import Zeta  # imported, not defined here: found once, in b\n\n"
        "@distributed_job\nclass Middle(DistributedJob):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert [cls.__qualname__ for cls in scan(["ordered_pkg"]).jobs] == ["Middle", "Zeta", "Alpha"]
    finally:
        for name in [m for m in sys.modules if m.startswith("ordered_pkg")]:
            del sys.modules[name]


def test_a_module_that_fails_to_import_is_named_with_the_original_error(tmp_path, monkeypatch):
    package = tmp_path / "broken_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "fine.py").write_text("X = 1\n")
    (package / "bad.py").write_text("import does_not_exist_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(DiscoveryError) as raised:
            scan(["broken_pkg"])
        message = str(raised.value)
        assert "could not import broken_pkg.bad while scanning broken_pkg" in message
        assert "ModuleNotFoundError" in message and "does_not_exist_anywhere" in message
        assert isinstance(raised.value.__cause__, ModuleNotFoundError)
    finally:
        for name in [m for m in sys.modules if m.startswith("broken_pkg")]:
            del sys.modules[name]
    with pytest.raises(DiscoveryError, match="could not import no_such_package_here"):
        scan(["no_such_package_here"])
    with pytest.raises(ValueError, match="dotted module names"):
        scan([""])


class AppContainer(containers.DeclarativeContainer):
    ledger = providers.Singleton(DepositLedger)
    retries = providers.Object(3)


def test_construct_resolves_by_name_then_by_type():
    container = AppContainer()
    counter = construct(DepositCounter, [offers_of_container(container)])
    assert counter.ledger is container.ledger()

    class ByType:
        def __init__(self, the_ledger: DepositLedger) -> None:
            self.ledger = the_ledger

    assert construct(ByType, [offers_of_container(container)]).ledger is container.ledger()

    class Defaults:
        def __init__(self, retries: int, missing: str = "kept") -> None:
            self.retries, self.missing = retries, missing

    built = construct(Defaults, [offers_of_container(container)])
    assert (built.retries, built.missing) == (3, "kept")


def test_the_first_source_wins():
    mine = DepositLedger()
    theirs = {"ledger": Offer(lambda: mine, DepositLedger)}
    counter = construct(DepositCounter, [theirs, offers_of_container(AppContainer())])
    assert counter.ledger is mine


def test_an_unresolvable_parameter_names_class_parameter_and_offers():
    with pytest.raises(ConstructionError) as raised:
        construct(TopUpJob, [offers_of_container(AppContainer())])
    message = str(raised.value)
    assert "cannot build integrations_sample.jobs.TopUpJob" in message
    assert "parameter 'executor' (ActionExecutor)" in message
    assert "on offer: ledger, retries" in message
    with pytest.raises(ConstructionError, match="no container was given"):
        construct(DepositCounter, [offers_of_container(None)])


def test_a_constructor_that_raises_is_reported_with_the_class():
    class Exploding:
        def __init__(self) -> None:
            raise RuntimeError("no config for me")

    with pytest.raises(ConstructionError, match=r"cannot build .*Exploding: RuntimeError: no config for me"):
        construct(Exploding, [])


def test_resources_are_matched_by_their_return_annotation():
    def make_executor() -> ActionExecutor:
        raise AssertionError("only the annotation is read here")

    class C(containers.DeclarativeContainer):
        something = providers.Resource(make_executor)

    offers = offers_of_container(C())
    assert offers["something"].produces is ActionExecutor
    with pytest.raises(TypeError, match="dependency-injector container"):
        offers_of_container(object())
