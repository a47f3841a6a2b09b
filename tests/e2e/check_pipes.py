#!/usr/bin/env python3
"""Finds `cmd | grep -q PATTERN` in the project's shell scripts.

Under `set -o pipefail` that pipeline can fail although the line is there:
grep -q (or grep -m N) exits at its first match and closes the pipe, and a cmd
still writing dies of SIGPIPE, whose status pipefail reports. It passes on a
quiet machine and fails on a loaded one. The scripts write
`cmd | grep_output -q PATTERN` (tests/e2e/lib.sh), grep a here-string or a
file, or run the pipeline in `bash -c` (a new shell without pipefail).

Checked: every *.sh under the given roots that sets pipefail or has no
shebang (sourced into one that does). Prints each finding as FILE:LINE and
exits 1 when there is one.

Usage: check_pipes.py ROOT...
"""
import pathlib
import re
import sys

EARLY_EXIT = re.compile(r"\|\s*(?:grep|egrep|fgrep)\s+(?:-[A-Za-z]*[qm][A-Za-z]*\b|--quiet|--silent|--max-count)")
PIPEFAIL = re.compile(r"^\s*set\s+(?:-[a-z]*o\s+pipefail|-o\s+pipefail)", re.M)


HEREDOC = re.compile(r"<<(-?)\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?")


def logical_lines(text):
    """Yields (first line number, the line joined across `|` and `\\` continuations).

    Here-document bodies are left out: they are data, or a script for another
    shell (`bash -s <<'EOF'`), which does not inherit pipefail.
    """
    lines = text.split("\n")
    i = 0
    heredoc = None  # (delimiter, tabs stripped)
    while i < len(lines):
        if heredoc is not None:
            body = lines[i].lstrip("\t") if heredoc[1] else lines[i]
            if body == heredoc[0]:
                heredoc = None
            i += 1
            continue
        start, joined = i, lines[i]
        while i + 1 < len(lines):
            tail = joined.rstrip()
            if tail.endswith("\\") or (tail.endswith("|") and not tail.endswith("||")):
                i += 1
                joined = tail.rstrip("\\") + " " + lines[i].strip()
            else:
                break
        yield start + 1, joined
        opener = HEREDOC.search(joined.replace("<<<", "   "))
        if opener:
            heredoc = (opener.group(2), opener.group(1) == "-")
        i += 1


def strip_comment(line):
    stripped = line.lstrip()
    if stripped.startswith("#"):
        return ""
    return re.split(r"\s#\s", line, maxsplit=1)[0]


def check(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    sourced = not text.startswith("#!")
    if not sourced and not PIPEFAIL.search(text):
        return []
    found = []
    for number, line in logical_lines(text):
        code = strip_comment(line)
        if "bash -c" in code:
            continue
        if EARLY_EXIT.search(code):
            found.append(f"{path}:{number}: {code.strip()[:160]}")
    return found


def main(roots):
    if not roots:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    found, scanned = [], 0
    for root in roots:
        for path in sorted(pathlib.Path(root).rglob("*.sh")):
            if "/.work/" in str(path) or "/.bin/" in str(path):
                continue
            scanned += 1
            found += check(path)
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} pipeline(s) into grep -q/-m under pipefail: write "
              "`cmd | grep_output -q PATTERN` (tests/e2e/lib.sh) or grep a here-string")
        return 1
    print(f"check_pipes: {scanned} scripts, no pipeline into grep -q/-m under pipefail")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
