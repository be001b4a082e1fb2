"""Ekbatan wired into applications: package discovery, a dependency-injector container, FastAPI
and Flask. Each integration is a module of its own, imported by name so that an application
loads only the framework it uses:

* ``ekbatan.integrations.discovery`` — ``scan(packages)``;
* ``ekbatan.integrations.runtime`` — ``build_runtime(config, packages)``, the graph every
  integration builds, usable on its own in a plain script;
* ``ekbatan.integrations.builder_settings`` — ``apply_jobs_settings(builder, settings.jobs)``;
* ``ekbatan.integrations.di`` — ``EkbatanContainer`` (extra ``[di]``);
* ``ekbatan.integrations.fastapi`` — ``ekbatan_lifespan(config, packages)``, dependencies,
  ``run_action``, ``health_router()`` (extra ``[fastapi]``);
* ``ekbatan.integrations.flask`` — the ``Ekbatan`` Flask extension and its
  ``health_blueprint()`` (extra ``[flask]``);
* ``ekbatan.integrations.health`` — ``health_report(runtime)``, the readiness report both serve;
* ``ekbatan.integrations.cli`` — the ``ekbatan`` command line (console script ``ekbatan``);
* ``ekbatan.integrations.task_views`` — the operator's view of ``scheduled_tasks``.
"""

from ekbatan.integrations.builder_settings import apply_jobs_settings
from ekbatan.integrations.construction import ConstructionError
from ekbatan.integrations.discovery import Discovered, DiscoveryError, scan
from ekbatan.integrations.runtime import EkbatanRuntime, build_runtime

__all__ = [
    "ConstructionError",
    "Discovered",
    "DiscoveryError",
    "EkbatanRuntime",
    "apply_jobs_settings",
    "build_runtime",
    "scan",
]
