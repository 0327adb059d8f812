"""Many hosts: inventory, per-host settings, and the rollout (canary, batches, forks, failure budget)."""
