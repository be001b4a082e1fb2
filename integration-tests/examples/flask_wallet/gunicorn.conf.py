"""gunicorn settings for the wallet service: ``gunicorn -c gunicorn.conf.py 'flask_wallet:create_app()'``.

Each worker starts its own job registry as it boots — after the fork, with pools of its own —
and stops it (jobs drain, pools close) before it exits. Works with ``--preload`` or without.
"""

import logging
import sys

from ekbatan.integrations.flask import gunicorn_post_worker_init, gunicorn_worker_exit

workers = 2
post_worker_init = gunicorn_post_worker_init
worker_exit = gunicorn_worker_exit


def on_starting(server):
    # Show Ekbatan's start and stop lines (with the process id) next to gunicorn's own.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(process)d] [%(levelname)s] %(name)s: %(message)s"))
    integration_log = logging.getLogger("ekbatan.integrations")
    integration_log.addHandler(handler)
    integration_log.setLevel(logging.INFO)
