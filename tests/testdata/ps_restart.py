"""A parameter server that is SIGKILLed and restarted, and a chief that rides it out (tests/items_test.go).

ps: serves "ps attempt N" on its TF_CONFIG port; once it has answered, writes PID_DIR/ps-<attempt>.json with its
pid and port.
chief: asks the ps its attempt until it answers from attempt 2. While the ps is down it reads the current map
from CLUSTERRUN_CLUSTER_FILE; SIGUSR2 (mapChangeSignal) says the map changed. Its result says what it saw.
"""
import json
import os
import signal
import socket
import sys
import time

import clusterrun

tf = json.loads(os.environ["TF_CONFIG"])
attempt = os.environ["CLUSTERRUN_ATTEMPT"]

if tf["task"]["type"] == "ps":
    port = int(tf["cluster"]["ps"][0].rsplit(":", 1)[1])
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("", port))
    srv.listen(16)
    served = 0
    while True:
        conn, _ = srv.accept()
        conn.sendall(("ps attempt %s\n" % attempt).encode())
        conn.close()
        served += 1
        if served == 1:  # the chief has its first answer: the test may kill this ps now
            tmp = os.path.join(os.environ["PID_DIR"], "ps-%s.tmp" % attempt)
            with open(tmp, "w") as f:
                json.dump({"pid": os.getpid(), "port": port}, f)
            os.rename(tmp, os.path.join(os.environ["PID_DIR"], "ps-%s.json" % attempt))

signaled = []
signal.signal(signal.SIGUSR2, lambda *_: signaled.append(time.time()))
first_addr = addr = tf["cluster"]["ps"][0]
answers = []
deadline = time.time() + 120
while time.time() < deadline:
    try:
        host, port = addr.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=2) as c:
            line = c.makefile().readline().strip()
        if not line:  # the ps died between taking the connection and answering
            raise OSError("the ps closed the connection without an answer")
        if not answers or answers[-1] != line:
            answers.append(line)
        if line == "ps attempt 2":
            break
    except OSError:
        with open(os.environ["CLUSTERRUN_CLUSTER_FILE"]) as f:
            addr = json.load(f)["cluster"]["ps"][0]
    time.sleep(0.05)
info = [e for e in clusterrun.info()["cluster"] if e["task"] == "ps-0"][0]
with open(os.environ["CLUSTERRUN_RESULT_FILE"], "w") as f:
    json.dump({"answers": answers, "first_addr": first_addr, "last_addr": addr, "signaled": bool(signaled),
               "info_addr": "%s:%d" % (info["addr"], info["port"]), "map_task": clusterrun.cluster_map()["task"],
               "map_ps": clusterrun.cluster_map()["cluster"]["ps"][0]}, f)
