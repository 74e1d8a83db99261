"""Fixtures of the cache tests: a local S3 server and a bucket on it (tests/_moto.py)."""
from tests._moto import moto_endpoint, s3_remote  # noqa: F401  (re-exported fixtures)
