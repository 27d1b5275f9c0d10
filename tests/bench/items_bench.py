"""Work-item benchmark (tests/bench/items.sh): run as a clusterrun task, or alone with --pool for the floor.

Chief: after DELAY seconds, schedules ITEMS no-op items and joins (throughput), then LATENCY items one at a
time, each fetched before the next is scheduled, GAP seconds apart (schedule -> result latency when idle).
Its result: items/s, p50, p95.
Workers: serve the no-op handler. --pool N: the same ITEMS through a local multiprocessing.Pool of N.
"""
import json
import os
import sys
import time


def noop(i):
    return i


def pool(n, procs):
    import multiprocessing
    t = time.monotonic()
    with multiprocessing.Pool(procs) as p:
        out = p.map(noop, range(n), chunksize=1)
    took = time.monotonic() - t
    assert out == list(range(n))
    print(json.dumps({"items": n, "seconds": took, "items_per_s": n / took}))


if __name__ == "__main__" and "--pool" in sys.argv:
    pool(int(os.environ.get("ITEMS", "20000")), int(sys.argv[sys.argv.index("--pool") + 1]))
    sys.exit(0)

import clusterrun  # noqa: E402  (only inside a task)

if os.environ["CLUSTERRUN_TASK_TYPE"] == "worker":
    clusterrun.serve({"noop": noop})
    sys.exit(0)

time.sleep(float(os.environ.get("DELAY", "0")))  # the workers wait for items meanwhile
n = int(os.environ.get("ITEMS", "20000"))
t = time.monotonic()
values = [clusterrun.schedule("noop", args=(i,)) for i in range(n)]
clusterrun.join()
took = time.monotonic() - t
bad = sum(1 for i, v in enumerate(values) if v.fetch() != i)

lat = []
for i in range(int(os.environ.get("LATENCY", "100"))):
    time.sleep(float(os.environ.get("GAP", "0")))
    s = time.monotonic()
    clusterrun.schedule("noop", args=(i,)).fetch()
    lat.append(time.monotonic() - s)
lat.sort()
with open(os.environ["CLUSTERRUN_RESULT_FILE"], "w") as f:
    json.dump({"items": n, "wrong": bad, "seconds": took, "items_per_s": n / took,
               "p50_ms": 1000 * lat[len(lat) // 2] if lat else None,
               "p95_ms": 1000 * lat[int(len(lat) * 0.95)] if lat else None}, f)
