"""What every new connection must be told before Ekbatan uses it (each dialect says what).

Registered as pool ``connect`` (and, on SQLite, ``begin``) listeners, so it runs once per
physical connection, including the ones a pool opens long after start-up.
"""

from __future__ import annotations

import sqlalchemy as sa

from ekbatan.core.persistence._dialect_names import DialectName
from ekbatan.core.persistence.dialects import dialect_support


def install_session_setup(engine: sa.Engine, dialect: DialectName) -> None:
    dialect_support(dialect).install_session_setup(engine)
