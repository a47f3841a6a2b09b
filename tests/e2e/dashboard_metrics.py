#!/usr/bin/env python3
"""Checks the Grafana dashboard's PromQL against the metrics the components export.

  --source SRC DASHBOARD    every accelpool_* name in the dashboard is registered in SRC
                            (AddCounter/AddGauge/AddHistogram("name", ...) calls; a histogram
                            also provides name_bucket, name_sum and name_count)
  --scraped FILE DASHBOARD  every accelpool_* name in the dashboard is in FILE (one series name
                            per line, e.g. Prometheus' /api/v1/label/__name__/values)
  --exprs DASHBOARD         print each panel query and variable query, one per line, with the
                            dashboard variables set to "All" (.*) and $__rate_interval to 5m
Findings go to stderr; exit 1 when a name is missing, 2 on bad usage or unreadable input.
"""
import json
import os
import re
import sys

NAME = re.compile(r"\baccelpool_[a-z0-9_]+")
REGISTRATION = re.compile(r"Add(Counter|Gauge|Histogram)\(\s*\"(accelpool_[a-z0-9_]+)\"")


def queries(dash):
    """(where, expr) for every panel target and every query variable."""
    out = []
    for p in dash.get("panels", []):
        for t in p.get("targets", []):
            if t.get("expr"):
                out.append(("panel %r" % p.get("title"), t["expr"]))
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            if q:
                out.append(("variable %r" % v.get("name"), q))
    return out


def registered(src):
    names = set()
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".cc") or f.endswith("_test.cc"):
                continue
            with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
                for kind, name in REGISTRATION.findall(fh.read()):
                    names.add(name)
                    if kind == "Histogram":
                        names.update(name + s for s in ("_bucket", "_sum", "_count"))
    return names


def missing(dash, known):
    errs = []
    for where, expr in queries(dash):
        for n in sorted(set(NAME.findall(expr))):
            if n not in known:
                errs.append("%s uses %s, which is not exported" % (where, n))
    return errs


def runnable(expr):
    """The expression with variables at All; label_values(m{...}, l) becomes m{...}."""
    m = re.match(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$", expr)
    if m:
        expr = m.group(1)
    expr = expr.replace("$__rate_interval", "5m")
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


def main(argv):
    try:
        if len(argv) == 4 and argv[1] in ("--source", "--scraped"):
            dash = json.load(open(argv[3], encoding="utf-8"))
            if argv[1] == "--source":
                known = registered(argv[2])
            else:
                known = {l.strip() for l in open(argv[2], encoding="utf-8") if l.strip()}
            if not queries(dash):
                sys.stderr.write("the dashboard has no queries\n")
                return 1
            errs = missing(dash, known)
            for e in errs:
                sys.stderr.write(e + "\n")
            if not errs:
                names = {n for _, e in queries(dash) for n in NAME.findall(e)}
                print("%d queries, %d metric names, all exported" % (len(queries(dash)), len(names)))
            return 1 if errs else 0
        if len(argv) == 3 and argv[1] == "--exprs":
            for _, e in queries(json.load(open(argv[2], encoding="utf-8"))):
                print(runnable(e).replace("\n", " "))
            return 0
    except (OSError, ValueError) as e:
        sys.stderr.write("dashboard_metrics: %s\n" % e)
        return 2
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
