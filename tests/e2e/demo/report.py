#!/usr/bin/env python3
"""The demo's placement table and pool utilisation (standard library only).

Reads the pods and nodes as `kubectl get -o json` writes them and derives
everything from the pods' accelpool.io/assignment and the nodes'
accelpool.io/inventory annotations, the way the device plugin counts usage:
init containers reuse the regular containers' shares, and a whole
(exclusive) device counts its full memory and 1000 thousandths of compute.

Subcommands:
  table PODS NODES OUTDIR    print the placement table and the utilisation by
                             vendor/model and by node; write OUTDIR/placement.txt,
                             OUTDIR/utilisation.json and the gnuplot inputs
                             OUTDIR/by-model.dat, OUTDIR/by-node.dat and
                             OUTDIR/placement-labels.gp (the table as labels)
  expect PODS NODES          utilisation as JSON: {"overall": f, "vendor": {v: f},
                             "model": {"vendor/model": f}, "allocated_mib": n, "capacity_mib": n}
Exit 1 with a message on stderr when an input cannot be read.
"""
import json
import os
import sys

ASSIGNMENT = "accelpool.io/assignment"
INVENTORY = "accelpool.io/inventory"
WHOLE = 1000


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def annotation(obj, key):
    raw = obj.get("metadata", {}).get("annotations", {}).get(key)
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def devices_by_node(nodes):
    """{node: {device id: (vendor, model, memory_mib)}} from the inventories."""
    out = {}
    for n in nodes.get("items", []):
        inv = annotation(n, INVENTORY) or {}
        devs = {}
        for i in inv.get("inventories", []):
            for d in i.get("devices", []):
                devs[d["id"]] = (i.get("vendor", "?"), d.get("model", "?"), int(d.get("memory_mib", 0)))
        out[n["metadata"]["name"]] = devs
    return out


def placements(pods, inv):
    """One row per pod holding devices: pod, node, vendor/model, devices, memory, compute."""
    rows = []
    for p in pods.get("items", []):
        a = annotation(p, ASSIGNMENT)
        node = p.get("spec", {}).get("nodeName")
        if not a or not node:
            continue
        devs = inv.get(node, {})
        used = {}  # device id -> [memory, compute], regular containers only
        kinds = set()
        for c in a.get("containers", []):
            if c.get("kind") == "init":
                continue
            for d in c.get("devices", []):
                vendor, model, cap = devs.get(d["id"], (c.get("vendor", "?"), "?", 0))
                kinds.add((vendor, model))
                whole = d.get("exclusive") or (d.get("memory_mib", 0) == 0 and d.get("compute", 0) == 0)
                u = used.setdefault(d["id"], [0, 0, d.get("index", -1)])
                u[0] += cap if whole else int(d.get("memory_mib", 0))
                u[1] += WHOLE if whole else int(d.get("compute", 0))
        rows.append({
            "pod": p["metadata"]["name"], "node": node,
            "kind": ",".join(sorted("%s/%s" % k for k in kinds)),
            "devices": sorted(u[2] for u in used.values()),
            "device_ids": sorted(used),
            "memory_mib": sum(u[0] for u in used.values()),
            "compute": sum(u[1] for u in used.values()),
            "usage": {i: u[:2] for i, u in used.items()},
        })
    return sorted(rows, key=lambda r: (r["node"], r["pod"]))


def utilisation(rows, inv):
    """Allocated vs capacity by (vendor, model) and by node."""
    by_model, by_node = {}, {}
    for node, devs in inv.items():
        for vendor, model, cap in devs.values():
            for key, table in (((vendor, model), by_model), (node, by_node)):
                t = table.setdefault(key, {"devices": 0, "used_devices": 0, "capacity_mib": 0,
                                           "allocated_mib": 0, "compute": 0})
                t["devices"] += 1
                t["capacity_mib"] += cap
    for r in rows:
        devs = inv.get(r["node"], {})
        for dev_id, (mem, cmp) in r["usage"].items():
            if dev_id not in devs:
                continue
            vendor, model, _ = devs[dev_id]
            for key, table in (((vendor, model), by_model), (r["node"], by_node)):
                table[key]["allocated_mib"] += mem
                table[key]["compute"] += cmp
    used = {(r["node"], d) for r in rows for d in r["usage"]}
    for node, dev_id in used:
        if dev_id in inv.get(node, {}):
            vendor, model, _ = inv[node][dev_id]
            by_model[(vendor, model)]["used_devices"] += 1
            by_node[node]["used_devices"] += 1
    return by_model, by_node


def pct(a, b):
    return 100.0 * a / b if b else 0.0


def gib(mib):
    return "%.0f GiB" % (mib / 1024.0) if mib % 1024 == 0 else "%.1f GiB" % (mib / 1024.0)


def render(rows, by_model, by_node):
    out = ["Placement (from each pod's accelpool.io/assignment)", ""]
    fmt = "%-16s %-10s %-20s %-16s %10s %10s"
    out.append(fmt % ("POD", "NODE", "VENDOR/MODEL", "DEVICES (index)", "MEMORY", "COMPUTE"))
    for r in rows:
        out.append(fmt % (r["pod"], r["node"], r["kind"], ",".join(map(str, r["devices"])),
                          gib(r["memory_mib"]), "%g dev" % (r["compute"] / float(WHOLE))))
    out.append("(COMPUTE in devices: 0.25 dev is a quarter of one device's compute)")
    out += ["", "Pool utilisation by vendor/model (allocated / capacity)", ""]
    fmt = "%-20s %8s %24s %7s %10s"
    out.append(fmt % ("VENDOR/MODEL", "DEVICES", "MEMORY", "MEM %", "COMPUTE %"))
    for (v, m), t in sorted(by_model.items()):
        out.append(fmt % ("%s/%s" % (v, m), "%d/%d" % (t["used_devices"], t["devices"]),
                          "%s / %s" % (gib(t["allocated_mib"]), gib(t["capacity_mib"])),
                          "%.1f" % pct(t["allocated_mib"], t["capacity_mib"]),
                          "%.1f" % pct(t["compute"], WHOLE * t["devices"])))
    out += ["", "Pool utilisation by node", ""]
    fmt = "%-20s %8s %24s %7s %10s"
    out.append(fmt % ("NODE", "DEVICES", "MEMORY", "MEM %", "COMPUTE %"))
    for n, t in sorted(by_node.items()):
        out.append(fmt % (n, "%d/%d" % (t["used_devices"], t["devices"]),
                          "%s / %s" % (gib(t["allocated_mib"]), gib(t["capacity_mib"])),
                          "%.1f" % pct(t["allocated_mib"], t["capacity_mib"]),
                          "%.1f" % pct(t["compute"], WHOLE * t["devices"])))
    return "\n".join(out) + "\n"


def table(pods_path, nodes_path, outdir):
    inv = devices_by_node(load(nodes_path))
    rows = placements(load(pods_path), inv)
    by_model, by_node = utilisation(rows, inv)
    text = render(rows, by_model, by_node)
    sys.stdout.write(text)
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "placement.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(outdir, "by-model.dat"), "w", encoding="utf-8") as f:
        f.write("# vendor/model memory% compute%\n")
        for (v, m), t in sorted(by_model.items()):
            f.write('"%s/%s" %.2f %.2f\n' % (v, m, pct(t["allocated_mib"], t["capacity_mib"]),
                                            pct(t["compute"], WHOLE * t["devices"])))
    with open(os.path.join(outdir, "by-node.dat"), "w", encoding="utf-8") as f:
        f.write("# node allocated_gib capacity_gib\n")
        for n, t in sorted(by_node.items()):
            f.write('"%s" %.2f %.2f\n' % (n, t["allocated_mib"] / 1024.0, t["capacity_mib"] / 1024.0))
    with open(os.path.join(outdir, "placement-labels.gp"), "w", encoding="utf-8") as f:
        # The table's lines as gnuplot labels for the top of utilisation.png.
        lines = text.splitlines()
        for i, line in enumerate(lines):
            esc = line.replace("\\", "\\\\").replace('"', '\\"')
            f.write('set label %d "%s" at screen 0.02, screen %.4f font "DejaVu Sans Mono,9"\n'
                    % (i + 1, esc, 0.985 - 0.52 * i / max(len(lines), 1)))
    doc = {"pods": [{k: v for k, v in r.items() if k != "usage"} for r in rows],
           "by_model": [dict(t, vendor=v, model=m) for (v, m), t in sorted(by_model.items())],
           "by_node": [dict(t, node=n) for n, t in sorted(by_node.items())]}
    with open(os.path.join(outdir, "utilisation.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)


def expect(pods_path, nodes_path):
    inv = devices_by_node(load(nodes_path))
    rows = placements(load(pods_path), inv)
    by_model, _ = utilisation(rows, inv)
    vendors = {}
    for (v, _), t in by_model.items():
        a = vendors.setdefault(v, [0, 0])
        a[0] += t["allocated_mib"]
        a[1] += t["capacity_mib"]
    alloc = sum(a for a, _ in vendors.values())
    cap = sum(c for _, c in vendors.values())
    json.dump({"overall": alloc / cap if cap else 0.0, "allocated_mib": alloc, "capacity_mib": cap,
               "vendor": {v: (a / c if c else 0.0) for v, (a, c) in vendors.items()},
               "model": {"%s/%s" % k: (t["allocated_mib"] / t["capacity_mib"] if t["capacity_mib"] else 0.0)
                         for k, t in by_model.items()}},
              sys.stdout, sort_keys=True)
    sys.stdout.write("\n")


def main(argv):
    try:
        if len(argv) == 5 and argv[1] == "table":
            table(argv[2], argv[3], argv[4])
        elif len(argv) == 4 and argv[1] == "expect":
            expect(argv[2], argv[3])
        else:
            sys.stderr.write(__doc__)
            return 2
    except (OSError, ValueError, KeyError) as e:
        sys.stderr.write("report: cannot read the cluster state: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
