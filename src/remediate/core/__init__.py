"""The pure core: unit files, probe parsers, backup sets. No I/O, no clock, no environment."""
