"""Keeping one cache healthy: verify, repair, clean, gc, stats, the usage summary, and why a key
is not cached (keydiff). Builds on `cache.read` and `cache.store`; never moves entries between
caches (that is `cache.transfer`)."""
