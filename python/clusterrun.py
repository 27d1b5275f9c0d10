"""clusterrun task client: barriers, progress, stop requests and the cluster map, from inside a clusterrun task.

A single file with no dependencies beyond the Python standard library (3.8+). Copy it next to your script or put
its folder on PYTHONPATH (for example ``env: {PYTHONPATH: /opt/clusterrun/python}`` in the run spec).

    import clusterrun

    clusterrun.barrier("ready", timeout=300)          # every task of the run
    clusterrun.barrier("ps-ready", tasks=["ps"])      # only the parameter servers
    clusterrun.progress(step, total_steps, "epoch 3")
    if clusterrun.should_stop():
        save_checkpoint(); sys.exit(0)
    clusterrun.request_stop(error="dataset shard 7 is corrupt")   # the run fails with this error
    print(clusterrun.info()["cluster"])

It talks JSON over HTTP to the task's control socket, whose path clusterrun puts in CLUSTERRUN_SOCKET. While
the socket is gone or answers 503 (the task's host worker is restarting), every call retries for up to
RETRY_FOR seconds; the next worker serves the socket again at the same path.
"""

import http.client
import json
import os
import socket
import time

__all__ = ["barrier", "progress", "request_stop", "should_stop", "stop_state", "info",
           "ClusterrunError", "BarrierError", "NotInTaskError", "RETRY_FOR"]

# How long a call keeps trying while the control socket is gone or unavailable (its host worker restarting).
RETRY_FOR = 120.0


class ClusterrunError(Exception):
    """The control socket refused a request, or could not be reached."""


class BarrierError(ClusterrunError):
    """A barrier was broken (a participant failed or was stopped) or timed out."""


class NotInTaskError(ClusterrunError):
    """The program does not run as a clusterrun task: CLUSTERRUN_SOCKET is not set."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=None):
        super().__init__("clusterrun", timeout=timeout)
        self._path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class _Unavailable(Exception):
    """The socket could not be reached, or answered 503: worth another try."""


def _once(sock_path, method, path, body, timeout):
    conn = _UnixConnection(sock_path, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
    except OSError as e:
        raise _Unavailable("control socket %s: %s" % (sock_path, e))
    finally:
        conn.close()
    try:
        payload = json.loads(raw) if raw else {}
    except ValueError:
        payload = {}
    if resp.status == 503:
        raise _Unavailable(payload.get("error") or "control socket answered 503")
    if resp.status != 200:
        msg = payload.get("error") or "control socket answered %d" % resp.status
        if path == "/v1/barrier" and resp.status in (409, 504):
            raise BarrierError(msg)
        raise ClusterrunError(msg)
    return payload


def _call(method, path, body=None, timeout=None):
    sock_path = os.environ.get("CLUSTERRUN_SOCKET")
    if not sock_path:
        raise NotInTaskError("not inside a clusterrun task: CLUSTERRUN_SOCKET is not set "
                             "(run this from a task started by clusterrun)")
    deadline = time.monotonic() + RETRY_FOR
    delay = 0.05
    while True:
        try:
            return _once(sock_path, method, path, body() if callable(body) else body, timeout)
        except _Unavailable as e:
            if time.monotonic() > deadline:
                raise ClusterrunError("%s (tried for %gs; is the task's host worker running?)" % (e, RETRY_FOR))
        time.sleep(delay)
        delay = min(delay * 2, 2.0)


def barrier(name, timeout=None, tasks=None):
    """Wait until every task (or every task of the given types) arrives at the barrier called name.

    timeout is in seconds (None waits as long as it takes). Raises BarrierError when the barrier is broken or
    times out; the message names the task that broke it, or those still missing.
    """
    if timeout is not None and timeout <= 0:
        raise ValueError("barrier timeout must be positive, got %r" % (timeout,))
    deadline = None if timeout is None else time.monotonic() + timeout
    tries = []

    def body():
        # A wait retried after the host worker restarted keeps the deadline of the first.
        b = {"name": name}
        if tasks:
            b["types"] = list(tasks)
        if deadline is not None:
            left = timeout if not tries else max(deadline - time.monotonic(), 0.001)
            b["timeout"] = "%gs" % left
        tries.append(1)
        return b
    _call("POST", "/v1/barrier", body)


def progress(current, total=None, message=None):
    """Report progress: current of total (total None when unknown), with an optional short message."""
    body = {"current": float(current)}
    if total is not None:
        body["total"] = float(total)
    if message:
        body["message"] = str(message)
    _call("POST", "/v1/progress", body)


def request_stop(error=None):
    """Ask the whole run to stop. With error, the run fails with it; without, it ends succeeded."""
    _call("POST", "/v1/stop", {"error": error} if error else {})


def stop_state():
    """The run's stop state: {"stop": bool, "by": task or "outside the run", "error": str}."""
    return _call("GET", "/v1/should-stop")


def should_stop():
    """True once any task, or someone outside the run, asked it to stop."""
    return bool(stop_state().get("stop"))


def info():
    """This task's identity (run, task, type, index, attempt, host) and the cluster map."""
    return _call("GET", "/v1/info")
