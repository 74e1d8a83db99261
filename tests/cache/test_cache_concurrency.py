"""Several processes sharing one cache; a builder killed mid-build."""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from kernelforge.cache import CacheStore, clean, verify
from tests.cache import _cache_helpers as h


def test_four_processes_build_each_key_once(tmp_path: Path) -> None:
    root, log = tmp_path / "cache", tmp_path / "log.txt"
    keys = [h.key_of(f"k{i}") for i in range(8)]
    # Overlapping key sets in different orders, all starting on the same key so they collide at once.
    sets = [[keys[0]] + keys[1 + 2 * i:] + keys[1:1 + 2 * i] for i in range(4)]
    sets[3] = sets[3][:5]
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=h.concurrent_worker, args=(str(root), s, str(log))) for s in sets]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0, f"worker exit code {p.exitcode}"

    lines = [line.split() for line in log.read_text().splitlines()]
    builds = Counter(parts[1] for parts in lines if parts[0] == "build")
    assert builds == Counter({k: 1 for k in keys}), "each key must be built exactly once"
    got = [parts for parts in lines if parts[0] == "got"]
    assert len(got) == sum(len(s) for s in sets)
    assert sum(int(parts[2]) for parts in got) == len(keys)  # built=True reported once per key

    store = CacheStore(root)
    assert set(store.index()) == set(keys)
    assert all(store.get(k) is not None for k in keys)
    report = verify(store)
    assert report.ok and report.entries == len(keys) and report.orphans == []


def test_killed_builder_leaves_no_entry(tmp_path: Path) -> None:
    root, marker = tmp_path / "cache", tmp_path / "started"
    key = h.key_of("killed")
    proc = subprocess.Popen([sys.executable, "-c", h.KILLED_BUILDER, str(root), key, str(marker)])
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert proc.poll() is None, "builder exited early"
            assert time.monotonic() < deadline, "builder never started building"
            time.sleep(0.02)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    store = CacheStore(root)
    assert store.get(key) is None and store.index() == {}
    report = verify(store)
    assert report.ok
    stale = list(store.layout.tmp.iterdir())
    assert len(stale) == 1 and report.orphans == stale  # the dead builder's staging dir

    assert clean(store).orphans_removed == stale
    assert list(store.layout.tmp.iterdir()) == []
    # its lock died with it: a new build proceeds
    entry, built = store.get_or_build(key, h.fake_build(b"complete"))
    assert built and (store.entry_dir(entry) / "module.so").read_bytes() == b"complete"
    assert verify(store).ok


def test_live_staging_dir_is_not_an_orphan(tmp_path: Path) -> None:
    store = CacheStore(tmp_path / "cache")
    staging = store.staging_dir()  # owned by this (live) process
    assert store.orphans() == []
    assert clean(store).orphans_removed == [] and staging.is_dir()


def test_threads_share_the_per_key_lock(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    store = CacheStore(tmp_path / "cache")
    key, calls = h.key_of("threads"), []

    def build(staging: Path) -> dict:
        calls.append(1)
        time.sleep(0.05)
        return h.fake_build()(staging)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: store.get_or_build(key, build), range(8)))
    assert len(calls) == 1 and sum(built for _, built in results) == 1
    assert verify(store).ok
