"""Task kinds and what becomes of an execution after its handler ran: completion, failure and
dead-execution handlers, the writes they may make, and the start-up tasks."""
