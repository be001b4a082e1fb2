"""A small wallet application wired with dependency-injector, run as ``python -m di_wallet``.

* ``domain`` — the wallet table, the ``MoneyDeposited`` event and the ``Deposit`` action, plus
  the two tables of the example's own (deposits counted by the handler, top-up runs);
* ``jobs`` — ``TopUpJob``, a recurring job (every second) that deposits into the house wallet;
* ``handlers`` — ``DepositCounter``, which counts every deposit into ``deposit_tally``;
* ``container`` — ``WalletContainer``, Ekbatan's container extended with the application's own
  provider (``tally``) that the handler receives by name;
* ``__main__`` — ``python -m di_wallet migrate`` (a deploy step) and ``python -m di_wallet``
  (serve until SIGTERM or SIGINT, then stop cleanly and exit 0).

The settings are ``application.yml`` next to this file; ``DI_WALLET_DATABASE_URL`` and
``DI_WALLET_EVENTLOG`` choose the database and the eventlog schema.
"""
