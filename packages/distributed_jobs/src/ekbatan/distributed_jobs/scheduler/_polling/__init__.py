"""Finding due work: the poll loop and its strategies, the rows claimed ahead of the workers,
claims from notifications, contention between instances, and the loop's sleep and wake-ups."""
