"""`oom --all-instances`: a template's change, then each other running instance restarted and verified in turn."""
