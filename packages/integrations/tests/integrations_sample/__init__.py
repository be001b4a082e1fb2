"""A small wallet application the integration tests scan: an action, a job, a handler."""
