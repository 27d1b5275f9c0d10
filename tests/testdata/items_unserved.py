"""Run as a clusterrun task by tests/items_test.go: the run's one worker serves an item of step, then quits
during its second (exit 0, so the run goes on); the chief's join says once on stderr that no task asks for
items of step any more, then times out."""
import json
import os

import clusterrun

if os.environ["CLUSTERRUN_TASK_TYPE"] == "worker":
    served = []

    def step(i):
        if served:
            os._exit(0)  # a worker that quits early: its item goes back to the queue when its lease ends
        served.append(i)
        return i * 2

    clusterrun.serve({"step": step}, batch=1)
else:
    first = clusterrun.schedule("step", args=(21,)).fetch(timeout=60)
    for i in range(3):
        clusterrun.schedule("step", args=(i,))
    try:
        clusterrun.join(timeout=45)
        out = "joined"
    except TimeoutError as e:
        out = str(e)
    with open(os.environ["CLUSTERRUN_RESULT_FILE"], "w") as f:
        json.dump({"first": first, "join": out}, f)
