#!/usr/bin/env python3
"""Lists dependency cycles between the top-level modules of a crate's src/ folder.

A module depends on another when its files name `crate::other` (in a `use` or a path).
Prints each strongly connected group of two or more modules with one example reference
per edge inside it, and exits 1 when there is any. Used to check the rule in
ARCHITECTURE.md ("no module cycle in engine/kiln or backends/cuda").

    scripts/module_cycles.py engine/kiln/src backends/cuda/src
    scripts/module_cycles.py --known ir,plugin engine/kiln/src   # a known cycle, reported, not failed
"""
import os
import re
import sys

REF = re.compile(r"crate::([a-z_][a-z0-9_]*)")
USE_GROUP = re.compile(r"use crate::\{([^;]*)\};", re.S)


def module_of(root, path):
    rel = os.path.relpath(path, root)
    first = rel.split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first


def references(text):
    """Top-level module names a file's text refers to through `crate::`."""
    text = re.sub(r"//[^\n]*", "", text)  # comments, doc links included, are not dependencies
    text = re.sub(r"#\[cfg\(test\)\]\s*mod tests\s*\{.*", "", text, flags=re.S)  # unit tests
    names = REF.findall(text)
    for group in USE_GROUP.findall(text):
        names += re.findall(r"(?:^|[,{\s])([a-z_][a-z0-9_]*)(?=::|\s*[,}]|\s*$)", group)
    return names


def graph(root):
    modules = {module_of(root, os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs if f.endswith(".rs")}
    modules.discard("lib")
    modules.discard("main")
    edges = {}
    for d, _, fs in os.walk(root):
        for f in fs:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(d, f)
            src = module_of(root, path)
            if src in ("lib", "main"):
                continue
            for name in references(open(path, encoding="utf-8").read()):
                if name in modules and name != src:
                    edges.setdefault(src, {}).setdefault(name, os.path.relpath(path, root))
    return modules, edges


def cycles(modules, edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in sorted(modules):
        if v not in index:
            visit(v)
    return out


def main():
    args = sys.argv[1:]
    known = []
    while args[:1] == ["--known"]:
        known.append(sorted(args[1].split(",")))
        args = args[2:]
    found = False
    for root in args or ["engine/kiln/src"]:
        modules, edges = graph(root)
        groups = cycles(modules, edges)
        print(f"{root}: {len(modules)} modules, {len(groups)} cycle(s)")
        for group in groups:
            is_known = group in known
            found |= not is_known
            print(("  known cycle: " if is_known else "  cycle: ") + ", ".join(group))
            for a in group:
                for b, where in sorted(edges.get(a, {}).items()):
                    if b in group:
                        print(f"    {a} -> {b}  ({where})")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
