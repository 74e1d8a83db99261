"""The cache's on-disk format and everything the runtime's load path imports (layout, entries,
index, dispatch views, the trust policy, layers, signatures, the tuning-table schema): no locks,
no reports. The writers of its own files (index.json and its views, the usage log) live next to
their readers. Imports nothing else of the cache (see `kernelforge.cache`)."""
