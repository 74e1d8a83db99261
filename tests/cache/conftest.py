"""Fixtures of the cache tests: a local S3 server and a bucket on it (tests/_moto.py), a loopback
HTTP remote (tests/_http.py)."""
from tests._http import http_root  # noqa: F401  (re-exported fixture)
from tests._moto import moto_endpoint, s3_remote  # noqa: F401  (re-exported fixtures)
