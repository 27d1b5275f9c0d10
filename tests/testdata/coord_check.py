"""tf.train.Coordinator parity across hosts (tests/coordination_test.go).

chief (one host): blocks in wait_for_stop until the worker (another host) asks every task to stop without
ending the run; takes the request back with clear_stop; then fails the run from stop_on_exception.
"""
import json
import os
import time

import clusterrun

me = os.environ["CLUSTERRUN_TASK_TYPE"]
clusterrun.barrier("ready")
if me == "worker":
    time.sleep(1)
    clusterrun.request_stop(keep_run=True)
    clusterrun.barrier("cleared")
    clusterrun.wait_for_stop()  # the chief's failure, this time for good
    raise SystemExit(0)

t0 = time.monotonic()
early = clusterrun.wait_for_stop(timeout=0.2)
got = clusterrun.wait_for_stop(timeout=60)
waited = time.monotonic() - t0
by = clusterrun.stop_state().get("by")
clusterrun.clear_stop()
deadline = time.monotonic() + 30
while clusterrun.should_stop() and time.monotonic() < deadline:
    time.sleep(0.05)
cleared = not clusterrun.should_stop()
clusterrun.barrier("cleared")
with open(os.environ["CLUSTERRUN_RESULT_FILE"], "w") as f:
    json.dump({"early": early, "got": got, "waited": waited, "by": by, "cleared": cleared}, f)
with clusterrun.stop_on_exception():
    raise ValueError("bad shard 7")
print("stop_on_exception swallowed it")
clusterrun.wait_for_stop()
