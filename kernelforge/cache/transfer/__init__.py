"""Moving entries between caches: merge (cache roots), push and pull (remote stores), export and
import (offline bundles), who may send what (provenance), and `commands.run_transfer`, the one
body of the four transfer commands. Builds on `cache.read`, `cache.store` and `cache.maintenance`."""
