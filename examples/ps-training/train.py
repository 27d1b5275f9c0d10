"""Parameter-server training in plain Python, the ClusterCoordinator way (no TensorFlow needed).

  chief   schedules training steps as work items and reads their losses (clusterrun.schedule / fetch / join)
  worker  serves steps: pull the parameters from the ps, compute a gradient on its batch, push it back
  ps      holds the parameters and applies the pushed gradients; it reaches nobody, everybody reaches it at
          its TF_CONFIG address

The model is linear regression, y = 3x + 2 plus noise, so the run can check that it learned. To show recovery,
the ps crashes once mid-run (CRASH_PS_AT pushes, first attempt only): its restart policy brings it back on the
same host at the same port, from its checkpoint, and the workers ride it out by retrying the connection.
The steps in flight at the crash fail or are retried; the chief schedules the rest and the loss keeps falling.
"""
import json
import os
import random
import socket
import socketserver
import sys
import threading
import time

import clusterrun

TF = json.loads(os.environ["TF_CONFIG"])
ROLE = TF["task"]["type"]
STEPS = int(os.environ.get("STEPS", "300"))
BATCH = 32
LR = 0.05


def ps_address():
    host, port = TF["cluster"]["ps"][0].rsplit(":", 1)
    return host, int(port)


# ---- ps ------------------------------------------------------------------------------------------------------

def serve_ps():
    ckpt = os.path.join(os.environ.get("CHECKPOINT_DIR", "/tmp"), "ps-%s.json" % os.environ["CLUSTERRUN_RUN_ID"])
    state = {"w": 0.0, "b": 0.0, "pushes": 0}
    if os.path.exists(ckpt):
        with open(ckpt) as f:
            state = json.load(f)
        print("ps attempt %s: resumed from its checkpoint at %d pushes" % (os.environ["CLUSTERRUN_ATTEMPT"], state["pushes"]), flush=True)
    crash_at = int(os.environ.get("CRASH_PS_AT", "0"))
    lock = threading.Lock()  # one update (and checkpoint) at a time

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            for line in self.rfile:
                msg = json.loads(line)
                with lock:
                    self.apply(msg)

        def apply(self, msg):
            if msg["op"] == "push":
                state["w"] -= LR * msg["gw"]
                state["b"] -= LR * msg["gb"]
                state["pushes"] += 1
                tmp = ckpt + ".tmp"
                with open(tmp, "w") as f:
                    json.dump(state, f)
                os.replace(tmp, ckpt)
                if state["pushes"] == crash_at and os.environ["CLUSTERRUN_ATTEMPT"] == "1":
                    print("ps: crashing on purpose after %d pushes" % crash_at, flush=True)
                    os._exit(1)
            self.wfile.write((json.dumps({"w": state["w"], "b": state["b"], "pushes": state["pushes"]}) + "\n").encode())

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    with socketserver.ThreadingTCPServer(("", ps_address()[1]), Handler) as srv:
        print("ps attempt %s serving at %s" % (os.environ["CLUSTERRUN_ATTEMPT"], TF["cluster"]["ps"][0]), flush=True)
        srv.serve_forever()


# ---- worker --------------------------------------------------------------------------------------------------

class PS:
    """A connection to the ps that rides out its restarts: it reconnects to the same address."""

    def __init__(self):
        self.f = None

    def call(self, msg):
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.f is None:
                    self.f = socket.create_connection(ps_address(), timeout=5).makefile("rw")
                self.f.write(json.dumps(msg) + "\n")
                self.f.flush()
                line = self.f.readline()
                if not line:
                    raise OSError("ps closed the connection")
                return json.loads(line)
            except OSError:
                self.f = None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


ps = PS()


def step(i):
    """One training step on batch i: pull, gradient, push. Returns the batch's loss before the update, and how
    many updates the parameters it pulled had seen (steps run in any order: that is their place in training)."""
    p = ps.call({"op": "pull"})
    rng = random.Random(i)
    gw = gb = loss = 0.0
    for _ in range(BATCH):
        x = rng.uniform(-1, 1)
        y = 3 * x + 2 + rng.gauss(0, 0.1)
        err = p["w"] * x + p["b"] - y
        loss += err * err / BATCH
        gw += 2 * err * x / BATCH
        gb += 2 * err / BATCH
    ps.call({"op": "push", "gw": gw, "gb": gb})
    return {"loss": loss, "at": p["pushes"]}


# ---- chief ---------------------------------------------------------------------------------------------------

def chief():
    steps = [clusterrun.schedule(step, args=(i,)) for i in range(STEPS)]
    clusterrun.join()
    losses = [s["loss"] for s in sorted((v.fetch() for v in steps), key=lambda s: s["at"])]
    final = PS().call({"op": "pull"})
    first, last = sum(losses[:20]) / 20, sum(losses[-20:]) / 20
    print("loss over the first 20 steps %.3f, over the last 20 %.4f; w=%.3f b=%.3f (want 3 and 2)"
          % (first, last, final["w"], final["b"]), flush=True)
    with open(os.environ["CLUSTERRUN_RESULT_FILE"], "w") as f:
        json.dump({"steps": len(losses), "first_loss": first, "last_loss": last, "w": final["w"], "b": final["b"]}, f)
    if abs(final["w"] - 3) > 0.2 or abs(final["b"] - 2) > 0.2:
        sys.exit("did not converge")


if __name__ == "__main__":
    {"ps": serve_ps, "worker": lambda: clusterrun.serve({"step": step}), "chief": chief}[ROLE]()
