"""Run as a clusterrun task by tests/items_test.go: the chief schedules items of a function no worker serves
(stepp, where the worker serves step); its join says so once on stderr, then times out."""
import json
import os

import clusterrun

if os.environ["CLUSTERRUN_TASK_TYPE"] == "worker":
    clusterrun.serve({"step": lambda i: i * 2})
else:
    clusterrun.UNTAKEN_NOTE_AFTER = 2.0
    served = clusterrun.schedule("step", args=(21,)).fetch(timeout=60)
    for i in range(3):
        clusterrun.schedule("stepp", args=(i,))
    try:
        clusterrun.join(timeout=25)
        out = "joined"
    except TimeoutError as e:
        out = str(e)
    with open(os.environ["CLUSTERRUN_RESULT_FILE"], "w") as f:
        json.dump({"served": served, "join": out}, f)
