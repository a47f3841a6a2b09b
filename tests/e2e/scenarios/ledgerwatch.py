#!/usr/bin/env python3
"""Checks the device ledger at every pod state the apiserver goes through.

Lists the nodes once and every pod, then watches the pods (all namespaces)
from that list's resourceVersion, resuming from the last one seen when a watch
ends. After each event it runs check.py's ledger over the live pods: no device
double-booked, no vendor rule broken. It also records each pod's
status.nominatedNodeName whenever a state shows one (kube-scheduler sets it
after a preemption; it is gone again once the pod binds).

Runs until STOP_FILE exists (or its parent process is gone), then prints one JSON line: events, states checked,
the first errors, and the nominations seen ("ns/name": node). Exits 1 on any
ledger error.

usage: ledgerwatch.py APISERVER_URL CA CERT KEY STOP_FILE [READY_FILE]
READY_FILE is created once the first watch is open.
"""
import contextlib
import io
import json
import os
import ssl
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402  (the ledger of the scenario suite)


def main(argv):
    if len(argv) not in (6, 7):
        print(__doc__, file=sys.stderr)
        return 2
    url, ca, cert, key, stop = argv[1:6]
    ready = argv[6] if len(argv) == 7 else ""
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(cert, key)

    def get(path, timeout=30):
        return urllib.request.urlopen(url + path, context=ctx, timeout=timeout)

    with get("/api/v1/nodes") as r:
        nodes = json.load(r)
    pods, rv = {}, None
    events = states = relists = 0
    errors, nominated = [], {}

    def judge():
        nonlocal states
        states += 1
        with contextlib.redirect_stdout(io.StringIO()):
            errs = check.ledger({"items": list(pods.values())}, nodes)
        for e in errs:
            if len(errors) < 20 and e not in errors:
                errors.append(e)

    parent = os.getppid()
    while not os.path.exists(stop) and os.getppid() == parent:
        if rv is None:
            relists += 1
            with get("/api/v1/pods") as r:
                listed = json.load(r)
            pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in listed["items"]}
            rv = listed["metadata"]["resourceVersion"]
            judge()
        try:
            with get(f"/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=1",
                     timeout=15) as r:
                if ready:
                    open(ready, "w").close()
                    ready = ""
                for line in r:
                    ev = json.loads(line)
                    obj = ev.get("object", {})
                    if ev.get("type") == "ERROR":  # e.g. 410 Gone: list again
                        rv = None
                        break
                    rv = obj["metadata"]["resourceVersion"]
                    if ev["type"] == "BOOKMARK":
                        continue
                    events += 1
                    k = (obj["metadata"]["namespace"], obj["metadata"]["name"])
                    if ev["type"] == "DELETED":
                        pods.pop(k, None)
                    else:
                        pods[k] = obj
                        nn = obj.get("status", {}).get("nominatedNodeName")
                        if nn:
                            nominated["%s/%s" % k] = nn
                    judge()
        except (OSError, ValueError) as e:
            print("ledgerwatch: watch ended (%s), resuming" % e, file=sys.stderr)
    print(json.dumps({"events": events, "states": states, "relists": relists,
                      "errors": errors, "nominated": nominated}))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
