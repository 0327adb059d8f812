"""The watcher's rails, pure: the policy, incident folding, the breaker and the decision (time passed in)."""
