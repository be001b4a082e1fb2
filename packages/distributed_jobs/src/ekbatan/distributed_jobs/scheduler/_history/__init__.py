"""Execution history: one row per finished run in ``<table>_history``, written off the hot path
by a background writer, pruned by a recurring task, read by the client and the command line."""
