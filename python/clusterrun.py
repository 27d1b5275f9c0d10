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

Work items (ClusterCoordinator's API; the run's spec needs `items: {}`):

    v = clusterrun.schedule("step", args=(3,))     # a RemoteValue at once; blocks while the queue is full
    clusterrun.join()                              # everything scheduled so far; raises the first error once
    print(v.fetch())
    clusterrun.serve({"step": train_step})         # on the workers: run items until the run stops

It talks JSON over HTTP to the task's control socket, whose path clusterrun puts in CLUSTERRUN_SOCKET. While
the socket is gone or answers 503 (the task's host worker is restarting), every call retries for up to
RETRY_FOR seconds; the next worker serves the socket again at the same path. A call that needs the Temporal
server (a barrier, a stop request, a work item) waits while the server is down, however long: the host worker
holds it and sends it once the server answers, and the call says so once on stderr after WAIT_NOTE_AFTER
seconds. Each call sends one request id with all its tries, so that a work-item call whose answer was lost with
its worker gets that answer again.
"""

import http.client
import json
import os
import socket
import sys
import threading
import time
import uuid

__all__ = ["barrier", "progress", "request_stop", "clear_stop", "wait_for_stop", "stop_on_exception",
           "should_stop", "stop_state", "info", "cluster_map",
           "schedule", "join", "done", "serve", "RemoteValue",
           "ClusterrunError", "BarrierError", "NotInTaskError", "ItemError", "RETRY_FOR", "WAIT_NOTE_AFTER",
           "UNTAKEN_NOTE_AFTER"]

# How long a call keeps trying while the control socket is gone or unavailable (its host worker restarting).
RETRY_FOR = 120.0
# A call that has waited this many seconds for the socket says so once on stderr, so the task's log shows why
# it seems stuck. A call that needs the Temporal server asks its socket as often whether its host worker holds it
# (the server has not taken it: an outage), and says that once too, and when the server answered it.
WAIT_NOTE_AFTER = 5.0
# A join or fetch whose items of one function have waited this many seconds, no task of the run having ever
# taken an item of that function (a name no worker serves: "stepp" for "step"), says so once on stderr.
UNTAKEN_NOTE_AFTER = 30.0

# The endpoints whose calls need the Temporal server: the host worker holds them while the server does not answer.
_MAY_BE_HELD = ("/v1/barrier", "/v1/stop", "/v1/clear-stop", "/v1/items/schedule", "/v1/items/take", "/v1/items/wait")


class ClusterrunError(Exception):
    """The control socket refused a request, or could not be reached."""


class BarrierError(ClusterrunError):
    """A barrier was broken (a participant failed or was stopped) or timed out."""


class NotInTaskError(ClusterrunError):
    """The program does not run as a clusterrun task: CLUSTERRUN_SOCKET is not set."""


class ItemError(ClusterrunError):
    """A scheduled function failed: its handler raised, or it was handed out maxAttempts times in vain."""


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


class _Unreached(ClusterrunError):
    """The socket could not be reached for RETRY_FOR: the call was given up unanswered."""


def _once(sock_path, method, path, body, timeout, request_id):
    conn = _UnixConnection(sock_path, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body, allow_nan=False).encode()
        conn.request(method, path, body=data,
                     headers={"Content-Type": "application/json", "Clusterrun-Request-Id": request_id})
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


def _socket_path():
    sock_path = os.environ.get("CLUSTERRUN_SOCKET")
    if not sock_path:
        raise NotInTaskError("not inside a clusterrun task: CLUSTERRUN_SOCKET is not set "
                             "(run this from a task started by clusterrun)")
    return sock_path


def _call(method, path, body=None, timeout=None):
    sock_path = _socket_path()
    # One id for every try of this call: a work-item call whose answer was lost (the host worker restarted
    # while it waited) is answered again, not applied again.
    request_id = uuid.uuid4().hex
    if path not in _MAY_BE_HELD:
        return _call_until(sock_path, method, path, body, timeout, request_id)
    _held.begin(sock_path, request_id)
    answered = False
    try:
        answer = _call_until(sock_path, method, path, body, timeout, request_id)
        answered = True
        return answer
    except ClusterrunError as e:
        answered = not isinstance(e, _Unreached)  # the host worker's refusal
        raise
    finally:
        _held.end(request_id, answered)


def _call_until(sock_path, method, path, body, timeout, request_id):
    """One call, tried again while the socket cannot be reached, for up to RETRY_FOR."""
    deadline = time.monotonic() + RETRY_FOR
    delay = 0.05
    began, said = time.monotonic(), False
    while True:
        try:
            return _once(sock_path, method, path, body() if callable(body) else body, timeout, request_id)
        except _Unavailable as e:
            if time.monotonic() > deadline:
                # from None: the message says it all; the chain of socket errors behind it would be three
                # tracebacks in the task's log.
                raise _Unreached("%s (tried for %gs; is the task's host worker running?)" % (e, RETRY_FOR)) from None
            if not said and time.monotonic() - began >= WAIT_NOTE_AFTER:
                said = True
                sys.stderr.write("clusterrun: %s; trying again for up to %gs (its host worker may be restarting)\n"
                                 % (e, RETRY_FOR))
                sys.stderr.flush()
        time.sleep(delay)
        delay = min(delay * 2, 2.0)


class _HeldCalls:
    """The calls under way that need the Temporal server. One thread, started with the first such call of a
    process, asks the socket every WAIT_NOTE_AFTER whether the host worker holds each call that has been under way
    that long because the server has not taken it (GET /v1/held), and says so once per call on stderr: a task
    waiting at a barrier through an outage is then not silent about why. (A thread per call cost 0.2 ms a call.)"""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls = {}  # request id -> [socket path, start, said]
        self.pid = None  # the process whose thread runs (a forked child starts its own)

    def begin(self, sock_path, request_id):
        with self.lock:
            self.calls[request_id] = [sock_path, time.monotonic(), False]
            if self.pid != os.getpid():
                self.pid = os.getpid()
                threading.Thread(target=self._watch, name="clusterrun-held", daemon=True).start()

    def end(self, request_id, answered):
        with self.lock:
            call = self.calls.pop(request_id, None)
        if answered and call is not None and call[2]:
            sys.stderr.write("clusterrun: the Temporal server answered the held call after %s\n"
                             % _seconds(time.monotonic() - call[1]))
            sys.stderr.flush()

    def _watch(self):
        while True:
            time.sleep(WAIT_NOTE_AFTER)
            now = time.monotonic()
            with self.lock:
                due = [(rid, c[0]) for rid, c in self.calls.items() if not c[2] and now - c[1] >= WAIT_NOTE_AFTER]
            for rid, sock_path in due:
                try:
                    ans = _once(sock_path, "GET", "/v1/held?id=" + rid, None, 5.0, uuid.uuid4().hex)
                except _Unavailable:
                    continue
                except ClusterrunError:
                    return  # a host worker older than the endpoint
                with self.lock:
                    call = self.calls.get(rid)
                    if not ans.get("held") or call is None or call[2]:
                        continue
                    call[2] = True
                sys.stderr.write("clusterrun: the Temporal server has not taken this call for %s (%s); its host worker "
                                 "holds it and sends it once the server answers, however long that takes\n"
                                 % (_seconds(ans.get("seconds") or 0), ans.get("why") or "no answer"))
                sys.stderr.flush()


_held = _HeldCalls()


def _seconds(s):
    """s seconds, rounded, written as the Go client writes a duration: 5s, 2m31s, 1h0m5s."""
    m, s = divmod(round(s), 60)
    h, m = divmod(m, 60)
    return "%dh%dm%ds" % (h, m, s) if h else "%dm%ds" % (m, s) if m else "%ds" % s


def barrier(name, timeout=None, tasks=None):
    """Wait until every task (or every task of the given types) arrives at the barrier called name.

    timeout is in seconds (None waits as long as it takes). Raises BarrierError when the barrier is broken or
    times out; the message names the task that broke it, or those still missing.
    """
    if timeout is not None and not timeout > 0:  # NaN too
        raise ValueError("barrier timeout must be positive, got %r" % (timeout,))
    if isinstance(tasks, str):
        tasks = [tasks]  # one type, not its letters
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
    body = {"current": _finite("current", current)}
    if total is not None:
        body["total"] = _finite("total", total)
    if message:
        body["message"] = str(message)
    _call("POST", "/v1/progress", body)


def _finite(name, x):
    f = float(x)
    if f != f or f in (float("inf"), float("-inf")):
        raise ValueError("progress: %s is %r; give a finite number" % (name, f))
    return f


def request_stop(error=None, keep_run=False):
    """Ask the whole run to stop. With error, the run fails with it; without, it ends succeeded.

    With keep_run, only ask every task to stop (should_stop and wait_for_stop turn true) and let the run go on,
    as tf.train.Coordinator.request_stop does; clear_stop() takes the request back."""
    body = {"error": error} if error else {}
    if keep_run:
        body["keepRun"] = True
    _call("POST", "/v1/stop", body)


def clear_stop():
    """Take back a request_stop(keep_run=True): should_stop is false again (tf.train.Coordinator.clear_stop)."""
    _call("POST", "/v1/clear-stop", {})


def _timeout(name, timeout):
    """timeout, checked: None (no limit) or seconds, 0 or more (NaN, a negative or a string would wait wrongly)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        raise ValueError("%s's timeout is seconds, 0 or more, or None to wait as long as it takes; got %r" % (name, timeout))
    return timeout


def wait_for_stop(timeout=None):
    """Block until the run asks its tasks to stop; True then, False if timeout (seconds) passed first."""
    timeout = _timeout("wait_for_stop", timeout)
    deadline = None if timeout is None else time.monotonic() + timeout

    def body():
        if deadline is None:
            return {}
        return {"timeout": "%gs" % max(deadline - time.monotonic(), 0)}
    return bool(_call("POST", "/v1/wait-for-stop", body).get("stop"))


class stop_on_exception:
    """Context manager: an exception inside it asks the run to stop, failing with that exception's text (and
    is swallowed, as in tf.train.Coordinator.stop_on_exception). SystemExit and KeyboardInterrupt pass.

        with clusterrun.stop_on_exception():
            train()
    """

    def __enter__(self):
        return self

    def __exit__(self, typ, value, tb):
        if typ is None or issubclass(typ, (SystemExit, KeyboardInterrupt)):
            return False
        request_stop(error="%s: %s" % (typ.__name__, value))
        return True


def stop_state():
    """The run's stop state: {"stop": bool, "by": task or "outside the run", "error": str}."""
    return _call("GET", "/v1/should-stop")


def should_stop():
    """True once any task, or someone outside the run, asked it to stop."""
    return bool(stop_state().get("stop"))


def info():
    """This task's identity (run, task, type, index, attempt, host) and the current cluster map."""
    return _call("GET", "/v1/info")


def cluster_map():
    """The run's current cluster map from CLUSTERRUN_CLUSTER_FILE, which the host rewrites when a task comes
    back at a new address: {"cluster": {type: ["host:port", ...]}, "task": ..., "endpoints": [...]}. The file
    is shared by the run's tasks on a host; "task" (as in TF_CONFIG) is this task's, from its environment."""
    path = os.environ.get("CLUSTERRUN_CLUSTER_FILE")
    if not path:
        raise NotInTaskError("not inside a clusterrun task: CLUSTERRUN_CLUSTER_FILE is not set")
    with open(path) as f:
        m = json.load(f)
    if "task" not in m:
        m["task"] = {"type": os.environ["CLUSTERRUN_TASK_TYPE"], "index": int(os.environ["CLUSTERRUN_TASK_INDEX"])}
    return m


# ---- Work items -------------------------------------------------------------------------------------------

# Bounds the host worker enforces: keep each call well inside them.
_MAX_BATCH = 500
_MAX_BATCH_BYTES = 512 << 10
_MAX_RESULT = 16 << 10
_MAX_ACKS = 10000
_WAIT = "10s"


class RemoteValue:
    """The future result of a scheduled item, as in ClusterCoordinator."""

    def __init__(self, items, fn, key):
        self._items = items
        self._done = threading.Event()
        self.fn, self.key = fn, key
        self.id = None            # set once the run has taken the item
        self._state = None        # "done" or "failed"
        self._value = None
        self._error = None

    def done(self):
        """True once the item has a result (or an error) here."""
        return self._done.is_set()

    def fetch(self, timeout=None):
        """Wait for the result and return it; raise ItemError if the item failed, TimeoutError on timeout."""
        self._items.wait_for(self, _timeout("fetch", timeout))
        if self._state == "failed":
            raise ItemError("item %s (%s) failed: %s" % (self.id, self.fn, self._error))
        return self._value

    def _resolve(self, r):
        self._state = r.get("state")
        self._value = r.get("result")
        self._error = r.get("error")
        self._done.set()

    def __repr__(self):
        return "<RemoteValue %s id=%s %s>" % (self.fn, self.id, self._state or "pending")


class _Items:
    """The calling process's scheduler: a buffer that a background thread sends in batches, and the
    RemoteValues waiting for results. Every call to the run hands back this task's finished results."""

    def __init__(self):
        self.lock = threading.Condition()
        self.buf = []             # [(RemoteValue, item)] not yet taken by the run
        self.by_id = {}           # id -> RemoteValue waiting for its result
        self.by_key = {}          # key -> RemoteValue
        self.thread = None
        self.failure = None       # an error the sender hit; raised by the next call
        self.calls = 0            # calls under way: each answer may carry any of this task's results
        self.got = []             # ids of results handed to this process, to acknowledge with the next call
        self.untaken_since = {}   # fn -> when an answer first said no task ever took an item of it
        self.said_untaken = set()
        self.said_unserved = set()  # fns an answer said no task asks for any more (its "unserved")

    def schedule(self, fn, args, key):
        with self.lock:
            if key is not None and key in self.by_key:
                return self.by_key[key]
            self._raise_failure()
            rv = RemoteValue(self, fn, key)
            item = {"fn": fn, "args": args}
            if key is not None:
                item["key"] = key
                self.by_key[key] = rv
            # A bounded queue: block while the run's queue is full and this process has a batch waiting.
            while len(self.buf) >= _MAX_BATCH and self.failure is None:
                self.lock.wait()
            self._raise_failure()
            self.buf.append((rv, item))
            if self.thread is None:
                self.thread = threading.Thread(target=self._send_loop, name="clusterrun-items", daemon=True)
                self.thread.start()
            self.lock.notify_all()
            return rv

    def _raise_failure(self):
        if self.failure is not None:
            f, self.failure = self.failure, None
            raise f

    def _send_loop(self):
        while True:
            with self.lock:
                while not self.buf:
                    self.lock.wait()
                batch, size = [], 0
                for rv, item in self.buf[:_MAX_BATCH]:
                    n = len(json.dumps(item))
                    if batch and size + n > _MAX_BATCH_BYTES:
                        break
                    batch.append((rv, item))
                    size += n

            def taken(ans):
                ids = ans.get("ids") or []
                for (rv, _), i in zip(batch, ids):
                    if rv.id is None:
                        rv.id = i
                        self.by_id.setdefault(i, []).append(rv)
                del self.buf[:len(ids)]

            try:
                self._call("/v1/items/schedule", {"items": [i for _, i in batch], "wait": _WAIT}, taken)
            except ClusterrunError as e:
                with self.lock:
                    # Nothing of this batch was taken: fail its values, and let the next call raise.
                    self.failure = e
                    for rv, _ in batch:
                        rv._resolve({"state": "failed", "error": str(e)})
                        if rv.key is not None and self.by_key.get(rv.key) is rv:
                            del self.by_key[rv.key]  # the key may be scheduled again
                    del self.buf[:len(batch)]
                    self.lock.notify_all()

    def _deliver(self, results):
        for r in results or []:
            self.got.append(r["id"])
            for rv in self.by_id.pop(r["id"], []):
                rv._resolve(r)

    def flush(self, deadline):
        with self.lock:
            while self.buf:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError("items still being scheduled")
                self.lock.wait(left)
            self._raise_failure()

    def wait_for(self, rv, timeout):
        deadline = None if timeout is None else time.monotonic() + timeout
        self.flush(deadline)
        while not rv.done():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError("item %s (%s) has no result after %gs" % (rv.id, rv.fn, timeout))
            wait = 10.0 if left is None else min(left, 10.0)
            ans = self._call("/v1/items/wait", {"ids": [rv.id], "wait": "%gs" % wait})
            self._note_untaken(ans)
            if rv.id in (ans.get("gone") or []):
                with self.lock:
                    self._gone(rv)

    def _note_untaken(self, ans):
        """Say once per function, on stderr, when this task's items of it have waited UNTAKEN_NOTE_AFTER and no
        task of the run ever took an item of it (the answer's "untaken"): they would wait for ever, silently.
        Say it too when the run says that no task has asked for them for 30 s, none running (its "unserved"):
        the tasks that served them have ended."""
        untaken, now = ans.get("untaken") or {}, time.monotonic()
        for fn in [f for f in self.untaken_since if f not in untaken]:
            del self.untaken_since[fn]
        for fn, n in sorted(untaken.items()):
            waited = now - self.untaken_since.setdefault(fn, now)
            if waited >= UNTAKEN_NOTE_AFTER and fn not in self.said_untaken:
                self.said_untaken.add(fn)
                sys.stderr.write("clusterrun: %d item(s) of %s have waited %ds, and no task of this run has taken an item "
                                 "of %s yet: does a task serve it? (clusterrun.serve({%r: ...}); clusterrun items %s "
                                 "lists them)\n" % (n, fn, waited, fn, fn, os.environ.get("CLUSTERRUN_RUN_ID", "RUN")))
                sys.stderr.flush()
        for fn, n in sorted((ans.get("unserved") or {}).items()):
            if fn not in self.said_unserved:  # the run timed it: say it at once
                self.said_unserved.add(fn)
                run = os.environ.get("CLUSTERRUN_RUN_ID", "RUN")
                sys.stderr.write("clusterrun: %d item(s) of %s wait, none runs, and no task of this run has asked for an "
                                 "item of %s in 30s: have the tasks that serve it ended? (clusterrun status %s shows "
                                 "them; clusterrun items %s lists the items)\n" % (n, fn, fn, run, run))
                sys.stderr.flush()

    def _call(self, path, body, taken=None):
        """A work-item call, counted while under way (see _gone). It acknowledges the results this process has
        been handed since the last call: the run keeps each until then, so that one whose answer was lost with a
        host worker can be asked for again. Its answer's results are delivered, after taken(answer) has seen
        it, under the lock, before the call stops counting."""
        with self.lock:
            self.calls += 1
            ack = self.got[:_MAX_ACKS]
            del self.got[:len(ack)]
        body = dict(body, acks=True)
        if ack:
            body["got"] = ack
        ans = None
        try:
            ans = _call("POST", path, body)
            return ans
        except BaseException:
            with self.lock:
                self.got[:0] = ack  # not acknowledged: the next call does
            raise
        finally:
            with self.lock:
                if ans is not None:
                    if taken is not None:
                        taken(ans)
                    self._deliver(ans.get("results"))
                self.calls -= 1
                self.lock.notify_all()

    def _gone(self, rv):
        """The run has no result of rv to hand out: it went out already. If another call of this process is
        under way, its answer may be carrying it: wait for that (a little), then fail rv."""
        end = time.monotonic() + 15
        while not rv.done() and self.calls > 0 and time.monotonic() < end:
            self.lock.wait(end - time.monotonic())
        if not rv.done():
            self.by_id.pop(rv.id, None)
            rv._resolve({"state": "failed", "error": "it has no result to hand out: a result goes out once, and this one "
                         "was handed out already, or no such item was scheduled"})

    def wait_all(self, timeout, wait=True):
        deadline = None if timeout is None else time.monotonic() + timeout
        self.flush(deadline)
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            w = 0 if not wait else (10.0 if left is None else max(min(left, 10.0), 0))
            ans = self._call("/v1/items/wait", {"all": True, "raise": True, "wait": "%gs" % w})
            self._note_untaken(ans)
            if ans.get("error"):
                raise ItemError(ans["error"])
            if ans.get("pending", 0) == 0:
                return True
            if not wait:
                return False
            if left is not None and left <= 0:
                raise TimeoutError("%d item(s) still pending after %gs" % (ans["pending"], timeout))


_items = None
_items_lock = threading.Lock()


def _scheduler():
    global _items
    _socket_path()  # outside a task, schedule says so at once, not at the next fetch or join (if any)
    with _items_lock:
        if _items is None:
            _items = _Items()
        return _items


def _args_json(args, kwargs):
    if kwargs:
        if args:
            raise ValueError("give args or kwargs, not both: the handler is called with one of them")
        out = dict(kwargs)
    else:
        out = list(args or ())
    problem = _not_json(out)
    if problem:
        raise ValueError("the item's arguments are not JSON: " + problem)
    return out


def _not_json(value):
    """Why value cannot travel as JSON (None when it can): the Go side reads strict JSON, which has no NaN
    or infinity, and Python's json writes them unless told not to."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return "JSON has no NaN or infinity: send None or a string in its place"
    except TypeError as e:
        return "%s: use lists, dicts, strings, numbers, booleans and None (float(x) or x.tolist() for NumPy " \
               "values)" % e
    return None


def schedule(fn, args=(), key=None, kwargs=None):
    """Schedule fn (a name, or a function whose __name__ the workers serve) with JSON-able args; return its
    RemoteValue at once. Any free worker runs it; an item whose worker dies runs again elsewhere. The same key
    returns the same RemoteValue, and its result, even from a restarted task. Blocks while the queue is full."""
    name = fn if isinstance(fn, str) else getattr(fn, "__name__", None)
    if not name or name == "<lambda>":
        raise ValueError("schedule needs a function name, or a function with a __name__ the workers serve "
                         "(a lambda has none), got %r" % (fn,))
    return _scheduler().schedule(name, _args_json(args, kwargs), key)


def join(timeout=None):
    """Wait until every item this task scheduled has finished. Raises ItemError with the first error since
    the last join or done, once; scheduling goes on afterwards."""
    _scheduler().wait_all(_timeout("join", timeout))


def done():
    """True if every item this task scheduled has finished; raises the first error once, like join."""
    return _scheduler().wait_all(None, wait=False)


def _handlers(handlers):
    """The dict of names to functions serve was given, or made from a function or a list of them."""
    if callable(handlers):
        handlers = [handlers]
    if isinstance(handlers, (list, tuple)):
        out = {}
        for f in handlers:
            name = getattr(f, "__name__", None)
            if not callable(f) or not name or name == "<lambda>":
                raise ValueError("serve's list holds functions served under their __name__; %r has none: give a dict, "
                                 "serve({'step': fn})" % (f,))
            out[name] = f
        return out
    if not isinstance(handlers, dict):
        raise ValueError("serve takes a dict of names to functions, serve({'step': fn}), or a list of functions; "
                         "got %s" % type(handlers).__name__)
    for name, f in handlers.items():
        if not isinstance(name, str) or not callable(f):
            raise ValueError("serve's handlers map names to functions: %r -> %r is not one" % (name, f))
    return handlers


def _outcome(item, handler):
    args = item.get("args")
    try:
        if isinstance(args, list):
            value = handler(*args)
        elif isinstance(args, dict):
            value = handler(**args)
        elif args is None:
            value = handler()
        else:
            value = handler(args)
    except Exception as e:  # the item fails with the handler's error; the worker goes on
        return {"id": item["id"], "lease": item["lease"], "error": "%s: %s" % (type(e).__name__, e)}
    problem = _not_json(value)
    if problem:  # a diverged loss (NaN) fails its item, not the worker and the rest of its batch
        return {"id": item["id"], "lease": item["lease"], "error": "the handler's result is not JSON: " + problem}
    raw = json.dumps(value)
    if len(raw) > _MAX_RESULT:
        return {"id": item["id"], "lease": item["lease"],
                "error": "result of %d bytes is over %d: write it to a file and return its path" % (len(raw), _MAX_RESULT)}
    return {"id": item["id"], "lease": item["lease"], "result": value}


class _Renewer:
    """Renews the leases of the items this worker holds while a handler runs, so that a long item, or the
    rest of a batch, is not handed to another worker."""

    def __init__(self):
        self.leases, self.every = [], None
        self.cond = threading.Condition()
        threading.Thread(target=self._loop, name="clusterrun-renew", daemon=True).start()

    def hold(self, leases, lease_seconds):
        with self.cond:
            self.leases, self.every = list(leases), max(lease_seconds / 3.0, 0.5)
            self.cond.notify_all()

    def _loop(self):
        while True:
            with self.cond:
                while not self.leases:
                    self.cond.wait()
                held = self.leases
                self.cond.wait(self.every)
                if self.leases is not held or not held:
                    continue
            try:
                _call("POST", "/v1/items/take", {"renew": held})
            except ClusterrunError:
                pass


def serve(handlers, batch=32, until_stop=True):
    """Serve items: take them from the run, call handlers[item's fn] in this long-lived process, report each
    JSON result (at most 16 KiB; return a path for more). handlers is a dict of names to functions, or a
    function or list of functions served under their __name__ (as schedule names them). A raising handler
    fails its item; serving goes on. Returns when the run is stopping (until_stop), else serves forever. Fast
    handlers take items in batches of up to batch; slow ones (over 0.1 s) one at a time, so that idle workers
    get the rest."""
    handlers = _handlers(handlers)
    fns = sorted(handlers)
    if not fns:
        raise ValueError("serve needs at least one handler: serve({'step': fn})")
    if not isinstance(batch, int) or batch < 1:
        raise ValueError("serve's batch is how many items a call may take: give 1 or more, got %r" % (batch,))
    done_ = []
    renewer = _Renewer()
    take = batch
    while True:
        ans = _call("POST", "/v1/items/take", {"done": done_, "fns": fns, "max": take, "wait": "5s"})
        done_ = []
        items = ans.get("items") or []
        if not items and until_stop and should_stop():
            return
        for i, item in enumerate(items):
            started = time.monotonic()
            renewer.hold([it["lease"] for it in items[i:]], item.get("leaseFor", 60e9) / 1e9)
            done_.append(_outcome(item, handlers[item["fn"]]))
            take = 1 if time.monotonic() - started > 0.1 else batch
        renewer.hold([], 60)
