"""``ekbatan demo``: three workers, recurring jobs, a burst of one-time tasks, actions whose
events two handlers receive, one worker killed halfway — and a summary proving the guarantees."""

from ekbatan.integrations.demo.run import DemoResult, run_demo

__all__ = ["DemoResult", "run_demo"]
