#!/usr/bin/env python3
"""The lines of src/ at a revision, by kind: code, docs (`///`, `//!`), tests
inside src, blank lines and comments.

Tests are classified by item: a `#[cfg(test)]` (or `#[cfg(all(test, ..))]`)
attribute makes the one item it is on a test, from the attribute to the item's
end (its closing brace, or its `;`). Files named `tests.rs` or `*_tests.rs` are
tests whole. Everything else is code, docs, comments or blank.

    python3 scripts/src_size.py [REV] [REPO]     # REV defaults to HEAD
    python3 scripts/src_size.py --files [REV]    # the same, a line per file
"""
import re
import subprocess
import sys

args = [a for a in sys.argv[1:] if not a.startswith("--")]
per_file = "--files" in sys.argv
rev = args[0] if args else "HEAD"
repo = args[1] if len(args) > 1 else "."

TEST_ATTR = re.compile(r"^#\[cfg\((test|all\(test\b)")


def strip(line, in_block):
    """The line without its strings, chars and comments (for counting braces), and whether a
    block comment is still open at its end."""
    out, i, n = [], 0, len(line)
    while i < n:
        if in_block:
            j = line.find("*/", i)
            if j < 0:
                return "".join(out), True
            i, in_block = j + 2, False
            continue
        ch = line[i]
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            in_block, i = True, i + 2
            continue
        m = re.match(r'r(#*)"', line[i:])
        if m and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == "_")):
            end = line.find('"' + m.group(1), i + len(m.group(0)))
            i = n if end < 0 else end + 1 + len(m.group(1))
            continue
        if ch == '"':
            i += 1
            while i < n and line[i] != '"':
                i += 2 if line[i] == "\\" else 1
            i += 1
            continue
        if ch == "'":
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", line[i:])
            if m:
                i += len(m.group(0))
                continue
        out.append(ch)
        i += 1
    return "".join(out), in_block


def count(text, whole_test, c):
    depth, in_block = 0, False
    test_from = None  # the depth at which the current #[cfg(test)] item started
    opened = False  # whether that item has opened its brace yet
    for line in text.splitlines():
        t = line.strip()
        c["total"] += 1
        if test_from is None and TEST_ATTR.match(t):
            test_from, opened = depth, False
        in_test = whole_test or test_from is not None
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
        code, in_block = strip(line, in_block)
        for ch in code:
            if ch == "{":
                depth += 1
                if test_from is not None:
                    opened = True
            elif ch == "}":
                depth -= 1
        if test_from is not None and not t.startswith("#"):
            if opened and depth <= test_from:
                test_from = None
            elif not opened and code.rstrip().endswith(";") and depth == test_from:
                test_from = None


files = subprocess.run(["git", "-C", repo, "ls-tree", "-r", "--name-only", rev, "src"],
                       capture_output=True, text=True, check=True).stdout.split()
keys = ("total", "code", "docs", "tests", "blank", "comments")
total = dict.fromkeys(keys, 0)
for f in files:
    if not f.endswith(".rs"):
        continue
    text = subprocess.run(["git", "-C", repo, "show", f"{rev}:{f}"], capture_output=True,
                          text=True).stdout
    name = f.rsplit("/", 1)[-1]
    c = dict.fromkeys(keys, 0)
    count(text, name == "tests.rs" or name.endswith("_tests.rs"), c)
    for k in keys:
        total[k] += c[k]
    if per_file:
        print(f"{c['code']:6} {c['total']:6} {f}")
print(rev, " ".join(f"{k}={v}" for k, v in total.items()))
