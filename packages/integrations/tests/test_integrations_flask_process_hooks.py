"""The Flask extension registers nothing with the process when imported: a forked child finds no
graph of its own by the process id, and the stop at exit is registered by the first start."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from integrations_support import application_yml, sqlite_with_wallets

from ekbatan.core import load_settings, migrate

TESTS = Path(__file__).resolve().parent


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_importing_the_extension_registers_no_exit_handler(tmp_path):
    # everything the module imports first, so that only its own registrations are counted
    probe = _python(
        """
        import atexit, click, flask
        import ekbatan.integrations.flask_cli, ekbatan.integrations.flask_operator
        import ekbatan.integrations.health, ekbatan.integrations.metrics_exposition
        import ekbatan.integrations.runtime, ekbatan.integrations.discovery
        before = atexit._ncallbacks()
        import ekbatan.integrations.flask
        print(atexit._ncallbacks() - before)
        """,
        tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["0"]


def test_a_process_that_started_and_never_stopped_is_stopped_at_exit(tmp_path):
    url = sqlite_with_wallets(tmp_path)
    config = application_yml(tmp_path, url)
    migrate(load_settings(config))
    run = _python(
        f"""
        import atexit, logging, sys
        from flask import Flask
        from ekbatan.integrations.flask import Ekbatan
        logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(name)s %(message)s")
        app = Flask("exiting")
        app.config.update(EKBATAN_CONFIG={str(config)!r}, EKBATAN_PACKAGES="integrations_sample.jobs")
        ekbatan = Ekbatan(app)
        before = atexit._ncallbacks()
        ekbatan.start(app)
        ekbatan.start(app)  # started already: no second registration
        print("registered", atexit._ncallbacks() - before)
        print("started", ekbatan.runtime_for(app).job_registry.scheduler.is_started)
        """,
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    out = run.stdout.split("\n")
    # the scheduler registers its own stop; the extension one more, for the pools after it
    assert "started True" in out, run.stdout
    registered = next(line for line in out if line.startswith("registered"))
    assert int(registered.split()[1]) >= 1, run.stdout
    assert "ekbatan.integrations.flask ekbatan stopped for 'exiting' in process" in run.stderr, run.stderr


def test_a_forked_child_starts_and_stops_its_own_graph_and_leaves_the_parents(tmp_path):
    # as gunicorn --preload: the parent built its graph but started no thread before forking
    url = sqlite_with_wallets(tmp_path)
    config = application_yml(tmp_path, url)
    migrate(load_settings(config))
    run = _python(
        f"""
        import os
        from flask import Flask
        from ekbatan.integrations.flask import Ekbatan
        app = Flask("forking")
        app.config.update(EKBATAN_CONFIG={str(config)!r}, EKBATAN_PACKAGES="integrations_sample.jobs")
        ekbatan = Ekbatan(app)
        parents = ekbatan.runtime_for(app)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                child = ekbatan.start(app)
                ok = child is not parents and child.started and not parents.started
                ekbatan.stop(app)
                code = 0 if ok and not child.started and ekbatan.runtime_for(app) is not child else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        print("parent", ekbatan.runtime_for(app) is parents, ekbatan.start(app) is parents)
        ekbatan.stop(app)
        """,
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:2] == ["child 0", "parent True True"], run.stdout + run.stderr
