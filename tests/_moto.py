"""A real S3 API for the remote-store tests: a local moto server in its own process.

`moto_endpoint` (session) starts `python -m moto.server` on a free port of 127.0.0.1, waits until it
answers and stops it after the session. `s3_remote` (per test) creates an empty bucket there and
gives the URL and the environment a user would set to reach it through s3fs: fake credentials and
`AWS_ENDPOINT_URL_S3` (botocore's per-service endpoint variable, read by s3fs through aiobotocore;
`AWS_ENDPOINT_URL`, `FSSPEC_S3_ENDPOINT_URL` and an `FSSPEC_CONFIG_DIR` file work as well), with no
inherited AWS_* or FSSPEC_* variable, no ~/.aws file and no kernelforge trust setting in the way.
Test packages that use them re-export them from their conftest.py.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

START_TIMEOUT_S = 10.0  # moto's import alone takes ~1 s on an idle core
_PORT_TRIES = 3  # a free port can be taken between probing it and the server binding it


@dataclass(frozen=True)
class S3Remote:
    url: str  # s3://bucket/prefix
    bucket: str
    prefix: str
    endpoint: str
    env: dict[str, str]  # the whole environment for a `kernelforge` subprocess

    def client(self) -> Any:
        """A boto3 S3 client on the server (to read or forge objects behind kernelforge's back)."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}"

    def get(self, rel: str) -> bytes:
        return self.client().get_object(Bucket=self.bucket, Key=self.key(rel))["Body"].read()

    def put(self, rel: str, data: bytes) -> None:
        self.client().put_object(Bucket=self.bucket, Key=self.key(rel), Body=data)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(endpoint: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
    try:
        opener.open(f"{endpoint}/moto-api/", timeout=1).close()
    except urllib.error.HTTPError:
        return True  # an HTTP answer, whatever its status
    except OSError:
        return False
    return True


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _start(log_dir: Path) -> tuple[subprocess.Popen, str]:
    """A running server and its endpoint; pytest.fail with the server's stderr if none comes up."""
    failures = []
    for attempt in range(_PORT_TRIES):
        port = _free_port()
        endpoint = f"http://127.0.0.1:{port}"
        log = log_dir / f"moto-{attempt}.log"
        with open(log, "wb") as out:  # a file, not a pipe: the server logs every request
            proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            if _answers(endpoint):
                return proc, endpoint
            time.sleep(0.1)
        how = f"exited {proc.returncode}" if proc.poll() is not None else "no answer, stopped"
        _stop(proc)
        failures.append(f"port {port}: {how}; its output:\n{log.read_text(errors='replace')[-2000:]}")
        if "Address already in use" not in failures[-1]:
            break
    pytest.fail(f"moto server did not answer within {START_TIMEOUT_S:.0f} s:\n" + "\n".join(failures))


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory) -> Iterator[str]:
    """The endpoint URL of a local moto server (one per test session)."""
    pytest.importorskip("moto.server", reason="needs moto's server (pip install 'moto[server]')")
    proc, endpoint = _start(tmp_path_factory.mktemp("moto"))
    try:
        yield endpoint
    finally:
        _stop(proc)


def s3_env(endpoint: str, home: Path) -> dict[str, str]:
    """The environment of a user whose S3 is `endpoint`: only what they would set (fake credentials)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FSSPEC_", "BOTO_"))
           and k not in ("KERNELFORGE_ALLOW_UNSIGNED", "KERNELFORGE_TRUSTED_KEYS")}
    env.update(XDG_CONFIG_HOME=str(home / "config"),  # no ~/.config/kernelforge/trusted-keys either
               AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_SESSION_TOKEN="testing",
               AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL_S3=endpoint,
               AWS_CONFIG_FILE=str(home / "aws-config"), AWS_SHARED_CREDENTIALS_FILE=str(home / "aws-credentials"),
               AWS_EC2_METADATA_DISABLED="true", NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
               COLUMNS="200")
    return env


@pytest.fixture
def s3_remote(moto_endpoint: str, tmp_path: Path) -> S3Remote:
    """An empty bucket of its own on the moto server, as s3://<bucket>/team/cache."""
    pytest.importorskip("s3fs", reason="s3:// needs s3fs (pip install 'kernelforge[remote-s3]')")
    bucket = f"kf-{uuid.uuid4().hex[:16]}"
    home = tmp_path / "aws-home"
    home.mkdir()
    remote = S3Remote(f"s3://{bucket}/team/cache", bucket, "team/cache", moto_endpoint, s3_env(moto_endpoint, home))
    remote.client().create_bucket(Bucket=bucket)
    return remote
