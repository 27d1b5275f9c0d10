"""Run as a clusterrun task by tests/coordination_test.go: exercises the Python client and bad requests."""
import http.client
import io
import json
import os
import sys

import clusterrun

out = {}
me = clusterrun.info()
out["task"] = me["task"]
out["cluster_size"] = len(me["cluster"])
clusterrun.progress(1, 2, "halfway")
clusterrun.barrier("py-ready", timeout=60)
out["should_stop"] = clusterrun.should_stop()


def raw(method, path, body=None):
    conn = clusterrun._UnixConnection(os.environ["CLUSTERRUN_SOCKET"], timeout=30)
    conn.request(method, path, body=body)
    resp = conn.getresponse()
    text = json.loads(resp.read()).get("error", "")
    conn.close()
    return "%d %s" % (resp.status, text)


out["unknown_endpoint"] = raw("GET", "/v1/bogus")
out["malformed"] = raw("POST", "/v1/barrier", b"{not json")
out["bad_type"] = raw("POST", "/v1/barrier", json.dumps({"name": "x", "types": ["gpu"]}).encode())
out["bad_name"] = raw("POST", "/v1/barrier", json.dumps({"name": ""}).encode())
out["bad_timeout"] = raw("POST", "/v1/barrier", json.dumps({"name": "y", "timeout": "soon"}).encode())
out["wrong_method"] = raw("GET", "/v1/barrier")

try:
    clusterrun.barrier("z", tasks=["gpu"])
    out["client_bad_type"] = "no error"
except clusterrun.ClusterrunError as e:
    out["client_bad_type"] = str(e)

# A call whose socket does not answer says so once on stderr, then gives up after RETRY_FOR.
real_socket, real_stderr = os.environ["CLUSTERRUN_SOCKET"], sys.stderr
retry_for, note_after = clusterrun.RETRY_FOR, clusterrun.WAIT_NOTE_AFTER
os.environ["CLUSTERRUN_SOCKET"] = real_socket + ".gone"
sys.stderr, clusterrun.RETRY_FOR, clusterrun.WAIT_NOTE_AFTER = io.StringIO(), 0.6, 0.1
try:
    clusterrun.info()
    out["gone_socket"] = "no error"
except clusterrun.ClusterrunError as e:
    out["gone_socket"] = str(e)
    out["gone_socket_chained"] = e.__cause__ is not None or not e.__suppress_context__
out["gone_socket_note"] = sys.stderr.getvalue()
os.environ["CLUSTERRUN_SOCKET"], sys.stderr = real_socket, real_stderr
clusterrun.RETRY_FOR, clusterrun.WAIT_NOTE_AFTER = retry_for, note_after

# One task type may be given as a string: tasks="worker" is that type, not the types w, o, r, k, e and r.
clusterrun.barrier("py-typed", timeout=60, tasks="worker")
out["typed_barrier"] = "passed"

clusterrun.barrier("py-done", timeout=60)
with open(os.environ["CLUSTERRUN_RESULT_FILE"], "w") as f:
    json.dump(out, f)
