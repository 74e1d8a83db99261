"""A property-based corpus of hostile inputs (hypothesis): spec TOML, CLI argument vectors, tuning
tables, bundle members, the Python API's argument checks, and fixed fault cases."""
