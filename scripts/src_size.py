#!/usr/bin/env python3
"""The lines of src/ at a revision, by kind: code, docs (`///`, `//!`), tests
inside src (files named tests.rs or *_tests.rs, and everything from a
`#[cfg(test)]` line to the end of its file), blank lines and comments.

    python3 scripts/src_size.py [REV] [REPO]     # REV defaults to HEAD
"""
import subprocess, sys
rev = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
repo = sys.argv[2] if len(sys.argv) > 2 else "."
files = subprocess.run(["git", "-C", repo, "ls-tree", "-r", "--name-only", rev, "src"],
                       capture_output=True, text=True, check=True).stdout.split()
c = dict(total=0, code=0, docs=0, tests=0, blank=0, comments=0)
for f in files:
    if not f.endswith(".rs"):
        continue
    text = subprocess.run(["git", "-C", repo, "show", f"{rev}:{f}"], capture_output=True, text=True).stdout
    in_test = f.endswith("tests.rs") or "/tests/" in f or f.endswith("/tests.rs")
    for line in text.splitlines():
        t = line.strip()
        c["total"] += 1
        if t.startswith("#[cfg(test)]"):
            in_test = True
        if not t:
            c["blank"] += 1
        elif in_test:
            c["tests"] += 1
        elif t.startswith("///") or t.startswith("//!"):
            c["docs"] += 1
        elif t.startswith("//"):
            c["comments"] += 1
        else:
            c["code"] += 1
print(rev, " ".join(f"{k}={v}" for k, v in c.items()))
