"""`watch`'s poll of one host: one bounded round trip per round."""
