"""Work items end to end: the chief schedules N items, the workers serve them; one worker may be SIGKILLed.

Env: ITEMS (how many), PID_DIR (a worker's first attempt writes <task>.pid there once it has served KILL_AFTER
items; KILL_TASK's then holds that item until it is killed).
The chief's result: how many results it got, how many were wrong, and the error join raised for a bad item.
"""
import json
import os
import sys
import time

import clusterrun

role = os.environ["CLUSTERRUN_TASK_TYPE"]
task = os.environ["CLUSTERRUN_TASK"]

if role == "worker":
    served = [0]

    def square(i):
        served[0] += 1
        first = os.environ.get("CLUSTERRUN_ATTEMPT") == "1"
        if first and served[0] == int(os.environ.get("KILL_AFTER", "0")) and os.environ.get("PID_DIR"):
            with open(os.path.join(os.environ["PID_DIR"], task + ".pid.tmp"), "w") as f:
                f.write(str(os.getpid()))
            os.rename(os.path.join(os.environ["PID_DIR"], task + ".pid.tmp"), os.path.join(os.environ["PID_DIR"], task + ".pid"))
            if task == os.environ.get("KILL_TASK"):
                # Hold this item until the test's SIGKILL: the kill then always finds items in flight, however
                # late it comes (the others may have served every other item by then).
                time.sleep(120)
        time.sleep(0.002)
        return i * i

    def bad(why):
        raise ValueError(why)

    def diverged():
        return {"loss": float("nan")}  # JSON has no NaN: the item fails, the worker serves on

    clusterrun.serve([square, bad, diverged])  # served under their __name__, as schedule names them
    sys.exit(0)

n = int(os.environ.get("ITEMS", "100"))
values = [clusterrun.schedule("square", args=(i,)) for i in range(n)]
same = clusterrun.schedule("square", args=(7,), key="seven")
again = clusterrun.schedule("square", args=(7,), key="seven")
clusterrun.join()
wrong = [i for i, v in enumerate(values) if v.fetch(timeout=60) != i * i]

# An error: join raises it once, then scheduling goes on.
clusterrun.schedule("bad", args=("shard 7 is corrupt",))
raised = ""
try:
    clusterrun.join()
except clusterrun.ItemError as e:
    raised = str(e)
after = clusterrun.schedule("square", args=(3,)).fetch(timeout=60)
clusterrun.join()  # nothing to raise any more

# A result that JSON cannot carry fails its item alone; arguments that it cannot carry are refused at once.
clusterrun.schedule("diverged")
nan = ""
try:
    clusterrun.join()
except clusterrun.ItemError as e:
    nan = str(e)
try:
    clusterrun.schedule("square", args=(float("inf"),))
    nan_args = "no error"
except ValueError as e:
    nan_args = str(e)
clusterrun.join()

with open(os.environ["CLUSTERRUN_RESULT_FILE"], "w") as f:
    json.dump({"results": len(values), "wrong": wrong[:10], "same_key": same is again and same.fetch() == 49,
               "raised": raised, "after": after, "done": clusterrun.done(), "nan": nan, "nan_args": nan_args}, f)
