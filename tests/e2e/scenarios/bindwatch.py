#!/usr/bin/env python3
"""Times a burst of bindings as a watcher of the apiserver sees them.

Lists the pods with a label selector, then watches them from that list's
resourceVersion and stamps the moment each pod first shows spec.nodeName.
Prints one JSON line: pods bound, seconds from the first to the last binding
seen, and pods/s over that span ((bound - 1) / span). Exits 1 when not every
pod is bound before the timeout.

usage: bindwatch.py APISERVER_URL CA CERT KEY NAMESPACE SELECTOR COUNT TIMEOUT_S [READY_FILE]
READY_FILE is created once the watch is open (start the scheduler after it).
"""
import json
import ssl
import sys
import time
import urllib.parse
import urllib.request


def main(argv):
    if len(argv) not in (9, 10):
        print(__doc__, file=sys.stderr)
        return 2
    url, ca, cert, key, ns, selector, count, timeout = argv[1:9]
    ready = argv[9] if len(argv) == 10 else ""
    count, timeout = int(count), float(timeout)
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(cert, key)
    base = f"{url}/api/v1/namespaces/{ns}/pods?labelSelector={urllib.parse.quote(selector)}"
    deadline = time.monotonic() + timeout
    stamps = {}
    already = set()
    relists = -1
    while time.monotonic() < deadline:
        # (Re)list: the apiserver may close a watch that falls behind; pods
        # found bound by a relist are stamped now (a late stamp: the rate
        # printed can only be lower than the true one).
        relists += 1
        with urllib.request.urlopen(base, context=ctx, timeout=30) as r:
            listed = json.load(r)
        now = time.monotonic()
        for p in listed["items"]:
            uid = p["metadata"]["uid"]
            if p["spec"].get("nodeName") and uid not in stamps and uid not in already:
                if relists == 0:
                    already.add(uid)
                else:
                    stamps[uid] = now
        if len(stamps) + len(already) >= count:
            break
        rv = listed["metadata"]["resourceVersion"]
        left = max(1, int(deadline - time.monotonic()))
        watch = f"{base}&watch=1&resourceVersion={rv}&timeoutSeconds={left}"
        with urllib.request.urlopen(watch, context=ctx, timeout=left + 30) as r:
            if ready and relists == 0:
                open(ready, "w").close()
            for line in r:
                now = time.monotonic()
                obj = json.loads(line).get("object", {})
                uid = obj.get("metadata", {}).get("uid")
                if (uid and uid not in stamps and uid not in already and
                        obj.get("spec", {}).get("nodeName")):
                    stamps[uid] = now
                if len(stamps) + len(already) >= count or now > deadline:
                    break
        if len(stamps) + len(already) >= count:
            break
    t = sorted(stamps.values())
    span = t[-1] - t[0] if len(t) > 1 else 0.0
    out = {"bound": len(t) + len(already), "expected": count, "already_bound": len(already),
           "relists": relists,
           "span_s": round(span, 3),
           "pods_per_s": round((len(t) - 1) / span, 1) if span > 0 else 0.0}
    print(json.dumps(out))
    return 0 if out["bound"] >= count else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
