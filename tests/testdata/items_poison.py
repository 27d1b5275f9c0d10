"""Work items with a poison item: every worker that runs item POISON dies at once (os._exit), as a process
that segfaults or runs out of memory on one input does. The workers take items in batches; the chief's result
says which items came back done and how the poison item failed.
"""
import json
import os
import sys

import clusterrun

poison = int(os.environ.get("POISON", "50"))

if os.environ["CLUSTERRUN_TASK_TYPE"] == "worker":
    def square(i):
        if i == poison:
            os._exit(3)
        return i * i

    clusterrun.serve({"square": square})
    sys.exit(0)

n = int(os.environ.get("ITEMS", "100"))
values = [clusterrun.schedule("square", [i]) for i in range(n)]
done, failed = [], {}
for i, rv in enumerate(values):
    try:
        if rv.fetch(timeout=120) == i * i:
            done.append(i)
    except clusterrun.ItemError as e:
        failed[str(i)] = str(e)
with open(os.environ["CLUSTERRUN_RESULT_FILE"], "w") as f:
    json.dump({"done": len(done), "failed": failed}, f)
