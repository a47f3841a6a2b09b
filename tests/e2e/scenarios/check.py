#!/usr/bin/env python3
"""Checks of the scenario suite (standard library only).

Subcommands (JSON in files or on stdin, findings on stderr, exit 1 on any):
  capacity-patch                  kubeletsim /v1/resources (stdin) -> Node status merge patch
  admit-request POD RESOURCES     the kubelet admission request for a bound pod
  verify-admit POD ADMIT NODE     kubeletsim's admission answer against the pod's assignment
  ledger PODS NODES               no device double-booked, vendor rules kept, across all pods
"""
import json
import sys

ASSIGNMENT = "accelpool.io/assignment"
INVENTORY = "accelpool.io/inventory"
VISIBLE_ENV = {"nvidia": "NVIDIA_VISIBLE_DEVICES", "ascend": "ASCEND_VISIBLE_DEVICES"}


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def assignment(pod):
    raw = pod.get("metadata", {}).get("annotations", {}).get(ASSIGNMENT)
    return json.loads(raw) if raw else None


def inventories(node):
    """The node's inventories; a malformed annotation counts as none (as the extender skips it)."""
    raw = node.get("metadata", {}).get("annotations", {}).get(INVENTORY)
    try:
        return json.loads(raw).get("inventories", []) if raw else []
    except (ValueError, AttributeError):
        return []


def capacity_patch(res):
    counts = {}
    for name, view in res.items():
        counts[name] = str(view.get("capacity", 0)), str(view.get("allocatable", 0))
    return {"status": {"capacity": {n: c for n, (c, _) in counts.items()},
                       "allocatable": {n: a for n, (_, a) in counts.items()}}}


def containers(pod):
    spec = pod["spec"]
    for c in spec.get("initContainers") or []:
        yield c, "sidecar" if c.get("restartPolicy") == "Always" else "init"
    for c in spec.get("containers") or []:
        yield c, "regular"


def admit_request(pod, res):
    out = []
    for c, kind in containers(pod):
        limits = dict((c.get("resources") or {}).get("requests") or {})
        limits.update((c.get("resources") or {}).get("limits") or {})
        req = {r: int(v) for r, v in limits.items() if r in res}
        out.append({"name": c["name"], "kind": kind, "requests": req})
    md = pod["metadata"]
    return {"pod_uid": md["uid"], "namespace": md["namespace"], "name": md["name"], "containers": out}


def verify_admit(pod, admit, node):
    errs = []
    asg = assignment(pod)
    if asg is None:
        return ["pod has no %s annotation" % ASSIGNMENT]
    if asg.get("node") != pod["spec"].get("nodeName"):
        errs.append("assignment names node %r, pod is bound to %r" % (asg.get("node"), pod["spec"].get("nodeName")))
    if not admit.get("admitted"):
        return errs + ["kubelet admission rejected the pod: %s" % admit.get("error")]
    devs = {d["id"]: (inv["vendor"], d) for inv in inventories(node) for d in inv["devices"]}
    by_name = {}
    for ac in asg.get("containers", []):
        by_name.setdefault((ac["name"], ac["resource"]), []).extend(ac["devices"])
    for cr in admit.get("containers", []):
        for rr in cr.get("resources", []):
            key = (cr["name"], rr["resource"])
            want = by_name.get(key)
            if want is None:
                errs.append("container %s got %s from kubelet but has no assignment for it" % key)
                continue
            slots = sorted(d["slot"] for d in want)
            got = sorted(rr.get("device_ids") or [])
            if got != slots:
                errs.append("container %s/%s: kubelet chose %s, the assignment says %s" % (key + (got, slots)))
            pref = ((rr.get("preferred") or {}).get("deviceIDs")) or []
            if rr.get("preferred_called") and sorted(pref) != slots:
                errs.append("container %s/%s: GetPreferredAllocation answered %s, want %s" % (key + (sorted(pref), slots)))
            envs = ((rr.get("allocate") or {}).get("envs")) or {}
            vendor = devs.get(want[0]["id"], ("?", {}))[0]
            var = VISIBLE_ENV.get(vendor)
            if var is not None:
                if var not in envs:
                    errs.append("container %s/%s: Allocate set no %s (envs %s)" % (key + (var, sorted(envs))))
                else:
                    shown = set(envs[var].split(","))
                    for d in want:
                        if d["id"] not in shown and str(d["index"]) not in shown:
                            errs.append("container %s/%s: %s=%s lacks device %s" % (key + (var, envs[var], d["id"])))
            if vendor == "nvidia":
                shared = [d for d in want if not d.get("exclusive")]
                for i, d in enumerate(shared if len(shared) == len(want) else []):
                    lim = envs.get("ACCELPOOL_CUDA_MEMORY_LIMIT_%d" % i)
                    if lim != str(d["memory_mib"]):
                        errs.append("container %s/%s: ACCELPOOL_CUDA_MEMORY_LIMIT_%d=%s, assignment says %s MiB"
                                    % (key + (i, lim, d["memory_mib"])))
                if shared and len(shared) == len(want):
                    pct = str(max(1, shared[0]["compute"] // 10)) if shared[0]["compute"] else None
                    if pct and envs.get("ACCELPOOL_CUDA_COMPUTE_LIMIT") != pct:
                        errs.append("container %s/%s: ACCELPOOL_CUDA_COMPUTE_LIMIT=%s, want %s"
                                    % (key + (envs.get("ACCELPOOL_CUDA_COMPUTE_LIMIT"), pct)))
    return errs


def ledger(pods, nodes):
    errs = []
    dev = {}
    topo = {}
    for n in nodes["items"]:
        for inv in inventories(n):
            for d in inv["devices"]:
                dev[(n["metadata"]["name"], d["id"])] = d
                topo[(n["metadata"]["name"], d["id"])] = inv["topology"]
    used = {}
    for p in pods["items"]:
        if p["status"].get("phase") in ("Succeeded", "Failed") or p["metadata"].get("deletionTimestamp"):
            continue
        asg = assignment(p)
        if asg is None:
            continue
        name = "%s/%s" % (p["metadata"]["namespace"], p["metadata"]["name"])
        # Per pod, a device counts once per sequential phase: init containers
        # run one after another, regular and sidecar containers together.
        init_peak, steady = {}, {}
        for c in asg["containers"]:
            ids = [d["id"] for d in c["devices"]]
            node = asg["node"]
            t = topo.get((node, ids[0])) if ids else None
            idx = sorted(d["index"] for d in c["devices"])
            if t and t.get("module_rule") == "whole_for_even" and len(idx) % 2 == 0:
                for m in t.get("modules", []):
                    inside = [i for i in idx if i in m]
                    if inside and len(inside) != len(m):
                        errs.append("%s container %s: even count %s splits module %s" % (name, c["name"], idx, m))
            if t and t.get("group_rule") == "required" and t.get("groups"):
                size = len(t["groups"][0])
                if len(idx) <= size and not any(set(idx) <= set(g) for g in t["groups"]):
                    errs.append("%s container %s: %s is not inside one group of %s" % (name, c["name"], idx, t["groups"]))
                if t.get("valid_counts") and len(idx) not in t["valid_counts"]:
                    errs.append("%s container %s: count %d not in %s" % (name, c["name"], len(idx), t["valid_counts"]))
            for d in c["devices"]:
                k = (node, d["id"])
                if k not in dev:
                    errs.append("%s container %s: device %s is not in node %s's inventory" % (name, c["name"], d["id"], node))
                    continue
                mem = dev[k]["memory_mib"] if d.get("exclusive") else d["memory_mib"]
                comp = 1000 if d.get("exclusive") else d["compute"]
                tgt = init_peak if c["kind"] == "init" else steady
                a = tgt.setdefault(k, [0, 0, 0, set()])
                if c["kind"] == "init":
                    a[0], a[1] = max(a[0], mem), max(a[1], comp)
                    a[2] = max(a[2], 1 if d.get("exclusive") else 0)
                else:
                    a[0] += mem; a[1] += comp; a[2] += 1 if d.get("exclusive") else 0
                a[3].add(d["slot"])
        for k in set(init_peak) | set(steady):
            i = init_peak.get(k, [0, 0, 0, set()]); s = steady.get(k, [0, 0, 0, set()])
            u = used.setdefault(k, {"mem": 0, "comp": 0, "excl": 0, "pods": [], "slots": {}})
            u["mem"] += max(i[0], s[0]); u["comp"] += max(i[1], s[1])
            u["excl"] += max(i[2], s[2]) and 1; u["pods"].append(name)
            for sl in i[3] | s[3]:
                if sl in u["slots"]:
                    errs.append("slot %s on %s held by %s and %s" % (sl, k[0], u["slots"][sl], name))
                u["slots"][sl] = name
    for k, u in used.items():
        d = dev.get(k)
        if d is None:
            continue
        if u["mem"] > d["memory_mib"]:
            errs.append("device %s on %s: %d MiB assigned, %d MiB exist (%s)" % (k[1], k[0], u["mem"], d["memory_mib"], u["pods"]))
        if u["comp"] > 1000:
            errs.append("device %s on %s: compute %d/1000 assigned (%s)" % (k[1], k[0], u["comp"], u["pods"]))
        if u["excl"] and len(u["pods"]) > 1:
            errs.append("device %s on %s: exclusive but shared by %s" % (k[1], k[0], u["pods"]))
    print("ledger: %d devices in use by %d pod-device pairs" % (len(used), sum(len(u["pods"]) for u in used.values())))
    return errs


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    try:
        if cmd == "capacity-patch":
            print(json.dumps(capacity_patch(json.load(sys.stdin))))
            return 0
        if cmd == "admit-request" and len(argv) == 4:
            print(json.dumps(admit_request(load(argv[2]), load(argv[3]))))
            return 0
        if cmd == "verify-admit" and len(argv) == 5:
            errs = verify_admit(load(argv[2]), load(argv[3]), load(argv[4]))
        elif cmd == "ledger" and len(argv) == 4:
            errs = ledger(load(argv[2]), load(argv[3]))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (OSError, ValueError, KeyError, TypeError) as e:
        print("check.py %s: cannot read the input (%s): rerun with the files the usage names" % (cmd, e), file=sys.stderr)
        return 2
    for e in errs:
        print("  violation: " + e, file=sys.stderr)
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
