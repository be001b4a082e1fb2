"""One small application that the entry-point contract test wires through every entry point:
a recurring job, a one-time task with typed data, an action recording an event, and two
handlers of that event. What it does is appended to the file ``$CONTRACT_SHOP_LOG`` names, one
line per piece of work, so that a worker process's work is seen from the test."""
