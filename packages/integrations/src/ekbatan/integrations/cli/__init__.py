"""The ``ekbatan`` command line (console script ``ekbatan``, or ``python -m ekbatan.integrations.cli``).

One module per command; each registers itself on :data:`main`, the click group, when imported
here. A new command is a module that defines it with
:func:`~ekbatan.integrations.cli.app.ekbatan_command` (shared options, error lines, exit codes)
or adds its own click command with ``main.add_command(...)``, plus one import line below.
"""

# Importing a command module registers its command on ``main``.
from ekbatan.integrations.cli import (  # noqa: F401
    controls_command,
    demo_command,
    doctor_command,
    events_command,
    history_command,
    migrate_command,
    tasks_command,
    ui_command,
    worker_command,
)
from ekbatan.integrations.cli.app import Invocation, ekbatan_command, main
from ekbatan.integrations.cli.targets import CliError

__all__ = ["CliError", "Invocation", "ekbatan_command", "main"]
