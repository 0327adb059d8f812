"""The mechanics every feature on the host floor shares: the probe (one read), the lock, the commit script, the
transaction (commit → wait → verify → undo), the health wait and its listener and environ checks, the host's read
helpers (facts), the run's options and its outcome, the templates. No feature lives here; every feature package
imports it, it imports none of them."""
