"""Keeping the cluster's rows honest while nothing else happens: the background loops,
heartbeats, dead-execution detection, and living through a database outage."""
