"""Work items across a restart of the scheduler's host worker.

The chief schedules ITEMS items, makes sure the run has them all (done), writes its pid to MARK_DIR/joining and
joins. The workers serve nothing until MARK_DIR/go exists: the test SIGKILLs the chief's host worker while the
join waits, then lets the items run, so that the join's answer, carrying every result, is made while no worker
is there to pass it on. The chief's result: how many results it got, and the first wrong or failed ones.

A flood task, once MARK_DIR/flood exists, schedules no-op items in rounds until MARK_DIR/flood-stop does: the
test uses it to grow the items workflow's history until it continues as new.
"""
import json
import os
import sys
import time

import clusterrun

mark = os.environ["MARK_DIR"]
role = os.environ["CLUSTERRUN_TASK_TYPE"]


def wait_for(name):
    while not os.path.exists(os.path.join(mark, name)):
        time.sleep(0.05)


if role == "worker":
    wait_for("go")
    clusterrun.serve({"square": lambda i: i * i, "noop": lambda: None})
    sys.exit(0)

if role == "flood":
    wait_for("flood")
    while not os.path.exists(os.path.join(mark, "flood-stop")):
        for _ in range(2000):
            clusterrun.schedule("noop")
        clusterrun.join()
    sys.exit(0)

n = int(os.environ.get("ITEMS", "100"))
values = [clusterrun.schedule("square", args=(i,)) for i in range(n)]
clusterrun.done()  # every item is the run's before the test kills anything
with open(os.path.join(mark, "joining.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.rename(os.path.join(mark, "joining.tmp"), os.path.join(mark, "joining"))
clusterrun.join()
wrong = []
for i, v in enumerate(values):
    try:
        if v.fetch(timeout=60) != i * i:
            wrong.append("item %d: %r" % (i, v.fetch()))
    except clusterrun.ItemError as e:
        wrong.append(str(e))
with open(os.environ["CLUSTERRUN_RESULT_FILE"], "w") as f:
    json.dump({"results": len(values), "wrong": wrong[:5]}, f)
