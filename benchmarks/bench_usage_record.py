import os
import statistics
import tempfile
import time

from kernelforge.cache.read.usage import UsageLog

d = tempfile.mkdtemp()
os.makedirs(f"{d}/v1")
firsts, nexts, offs = [], [], []
for i in range(200):
    log = UsageLog(d)
    t0 = time.perf_counter()
    log.record("load", "quantize", f"{i:064d}")
    t1 = time.perf_counter()
    log.record("hit", "quantize", f"{i:064d}")
    t2 = time.perf_counter()
    log.record("load", "quantize", f"{i:064d}")  # deduplicated
    t3 = time.perf_counter()
    firsts.append(t1 - t0)
    nexts.append(t2 - t1)
    offs.append(t3 - t2)
    os.close(log._fd)
ro = UsageLog(d, enabled=False)
t0 = time.perf_counter()
for _ in range(10000):
    ro.record("hit", "quantize", "k")
print(f"first event (mkdir/open/write): median {statistics.median(firsts)*1e6:.1f} us, max {max(firsts)*1e6:.1f} us")
print(f"later event (one os.write): median {statistics.median(nexts)*1e6:.1f} us")
print(f"repeated load (dedup, no write): median {statistics.median(offs)*1e6:.2f} us")
print(f"disabled (read-only layer): {(time.perf_counter()-t0)/10000*1e9:.0f} ns")
