#!/usr/bin/env python3
"""Fails when a file under src/<module>/ includes a header of a module it may
not use. The layers are docs/ARCHITECTURE.md's: each module names the modules
it uses directly; what they use is allowed too. Run by `make test` (ctest
`layering`): an include that crosses the layers upward fails CI.

Usage: check_layering.py [REPO_ROOT]
"""
import os
import re
import sys

# module -> the modules it uses directly (docs/ARCHITECTURE.md).
USES = {
    "common": [],
    "codec": ["common"],
    "text": ["common"],
    "io": ["common"],
    "index": ["common"],
    "memory": ["common"],
    "tiers": ["codec", "io", "memory"],
    "transfer": ["tiers"],
    "planner": ["common"],
    "model": ["planner"],
    "engine": ["model", "memory", "text"],
    "cache": ["index", "transfer", "planner"],
    "runtime": ["cache", "engine"],
    "sim": ["cache", "model"],
    "client": ["common"],
    "server": ["runtime"],
    "router": ["server", "client"],
    "cuda": ["engine"],
}


def allowed(module, seen=None):
    seen = set() if seen is None else seen
    for m in USES[module]:
        if m not in seen:
            seen.add(m)
            allowed(m, seen)
    return seen | {module}


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    include = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"')
    src = os.path.join(root, "src")
    bad = []
    for module in sorted(os.listdir(src)):
        path = os.path.join(src, module)
        if not os.path.isdir(path):
            continue
        if module not in USES:
            bad.append(f"src/{module}/: a module missing from scripts/check_layering.py (and docs/ARCHITECTURE.md)")
            continue
        ok = allowed(module) | {"kvtier"}  # include/kvtier: the public types, below everything
        for dirpath, _, files in os.walk(path):
            for f in files:
                if not f.endswith((".h", ".cc", ".cu", ".inc")):
                    continue
                file = os.path.join(dirpath, f)
                for n, line in enumerate(open(file, encoding="utf-8"), 1):
                    m = include.match(line)
                    if m and m.group(1) in USES and m.group(1) not in ok:
                        bad.append(f"{os.path.relpath(file, root)}:{n}: {module}/ may not include {m.group(1)}/")
    for b in bad:
        print(b)
    if bad:
        print(f"{len(bad)} include(s) cross the layers (scripts/check_layering.py, docs/ARCHITECTURE.md)")
        return 1
    print("layering: every include in src/ stays within its module's layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
