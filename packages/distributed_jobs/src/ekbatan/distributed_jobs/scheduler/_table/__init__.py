"""Everything that reads and writes ``scheduled_tasks``: the repository, its statements and
row shape, the read-only listings, and the retries and session settings around them."""
