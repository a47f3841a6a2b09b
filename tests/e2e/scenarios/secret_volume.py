#!/usr/bin/env python3
"""Plays kubelet's Secret volume for the scenario suite.

Every INTERVAL seconds, reads Secret NS/NAME with kubectl and writes its data
into DIR, one file per key: new and changed keys first (each written whole to a
temporary file, then renamed into place), then the files the Secret no longer
holds are removed. The key files go before "signing", so a reader never sees
"signing" name a key whose file is not there yet. Runs until killed.

Usage: secret_volume.py KUBECTL NS NAME DIR [INTERVAL]
"""
import base64
import json
import os
import subprocess
import sys
import time


def sync(kubectl, ns, name, directory):
    out = subprocess.run([kubectl, "-n", ns, "get", "secret", name, "-o", "json"],
                         capture_output=True, text=True, timeout=20)
    if out.returncode != 0:
        return
    data = {k: base64.b64decode(v) for k, v in json.loads(out.stdout).get("data", {}).items()}
    order = sorted(k for k in data if k != "signing") + (["signing"] if "signing" in data else [])
    for key in order:
        path = os.path.join(directory, key)
        try:
            with open(path, "rb") as f:
                if f.read() == data[key]:
                    continue
        except FileNotFoundError:
            pass
        tmp = os.path.join(directory, "." + key + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data[key])
        os.chmod(tmp, 0o600)
        os.rename(tmp, path)
    for entry in os.listdir(directory):
        if not entry.startswith(".") and entry not in data:
            os.remove(os.path.join(directory, entry))


def main():
    kubectl, ns, name, directory = sys.argv[1:5]
    interval = float(sys.argv[5]) if len(sys.argv) > 5 else 2.0
    while True:
        try:
            sync(kubectl, ns, name, directory)
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            print(f"secret_volume: {e}", file=sys.stderr)
        time.sleep(interval)


if __name__ == "__main__":
    main()
