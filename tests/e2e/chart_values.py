#!/usr/bin/env python3
"""Every value of the chart is documented in its README.

Usage: chart_values.py VALUES_YAML README_MD
A value is a leaf of values.yaml (a scalar, a list, or an empty map) or a map whose keys are
free-form (resources, labels, nodeLabels, env, issuerRef, nodeSelector, affinity). It is documented when
the README names its dotted path in backquotes; the per-vendor values may be written once as
devicePlugin.vendors.<v>.KEY. Prints the undocumented paths to stderr and exits 1 when any.
Needs PyYAML (Debian python3-yaml).
"""
import re
import sys

import yaml

FREE_FORM = {"resources", "labels", "nodeLabels", "env", "issuerRef", "nodeSelector", "affinity",
             "image"}


def leaves(node, prefix=""):
    if isinstance(node, dict) and node and prefix.rsplit(".", 1)[-1] not in FREE_FORM:
        for k, v in node.items():
            yield from leaves(v, "%s.%s" % (prefix, k) if prefix else k)
    else:
        yield prefix


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        values = yaml.safe_load(f)
    with open(argv[2], encoding="utf-8") as f:
        named = set(re.findall(r"`([A-Za-z0-9_.<>]+)`", f.read()))
    missing = []
    for path in leaves(values):
        generic = re.sub(r"^devicePlugin\.vendors\.[a-z]+\.", "devicePlugin.vendors.<v>.", path)
        # an image map is documented by its parts or as a whole
        if path in named or generic in named:
            continue
        if path.endswith(".image") or path == "image":
            parts = [path + "." + p for p in ("repository", "tag", "pullPolicy")]
            if all(p in named for p in parts) or path in named:
                continue
        missing.append(path)
    for m in missing:
        sys.stderr.write("values.yaml: %s is not documented in the README\n" % m)
    if not missing:
        print("%d values, all documented" % len(list(leaves(values))))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
