"""A small wallet served by FastAPI under uvicorn: a deposit endpoint running an action that
records ``MoneyDeposited`` and schedules a one-time receipt task for it, a handler that records
every deposit it is told about, a recurring job that records each slot it runs, and the receipt
task, which records each receipt it sends. Everything is written to the wallet's own tables, so
that a test can see what every worker process did.

Deploy it as a user would::

    export WALLET_DATABASE_URL=postgresql+psycopg://...
    python -m fastapi_wallet.migrate                  # framework tables and the wallet's own
    uvicorn fastapi_wallet.app:app --workers 2
"""
