# One work item, as clusterrun task serve runs it: the arguments on stdin (and in CLUSTERRUN_ITEM_ARGS), the
# function's name in CLUSTERRUN_ITEM_FN, the result on stdout, a failure as an exit other than 0.
import json
import os
import sys

fn = os.environ["CLUSTERRUN_ITEM_FN"]
args = json.loads(sys.stdin.read() or "null")
if os.environ.get("CLUSTERRUN_ITEM_ARGS", "") != (json.dumps(args, separators=(",", ":")) if args is not None else ""):
    sys.exit("CLUSTERRUN_ITEM_ARGS is %r, stdin %r" % (os.environ.get("CLUSTERRUN_ITEM_ARGS"), args))
if fn == "sq":
    print(json.dumps(args[0] * args[0]))
elif fn == "word":
    print(("hello " * args["n"]).strip())
elif fn == "quiet":
    pass
else:
    print("about to fail", file=sys.stderr)
    sys.exit("boom: shard 7 is corrupt")
