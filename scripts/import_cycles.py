#!/usr/bin/env python3
"""Import cycles between the files of one crate: `python3 scripts/import_cycles.py services/core/src [-v]`.

Edges run file -> file from `crate::`, `super::`, `self::` and child-module paths (use trees and
inline paths; comments and strings skipped). A child file reaching into its own parent (`super::*`)
is one module split in files and is not counted. Prints the strongly connected components of more
than one file (-v: with the names each edge takes)."""
import os, re, sys
from collections import defaultdict

root = sys.argv[1]  # .../src
verbose = '-v' in sys.argv

def modpath(rel):
    p = rel[:-3].split('/')
    if p[-1] in ('lib', 'main') and len(p) == 1: return ()
    if p[-1] == 'mod': p = p[:-1]
    return tuple(p)

files = {}
for d, _, fs in os.walk(root):
    for f in fs:
        if f.endswith('.rs'):
            rel = os.path.relpath(os.path.join(d, f), root)
            files[modpath(rel)] = rel

def strip(src):
    out = []; i = 0; n = len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i); i = n if j < 0 else j
        elif src.startswith('/*', i):
            j = src.find('*/', i + 2); i = n if j < 0 else j + 2
        elif c == 'r' and re.match(r'r#*"', src[i:i+10]) and (i == 0 or not (src[i-1].isalnum() or src[i-1] == '_')):
            h = re.match(r'r(#*)"', src[i:]).group(1)
            j = src.find('"' + h, i + len(h) + 2); i = n if j < 0 else j + 1 + len(h); out.append('""')
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == '\\' else 1
            i = j + 1; out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", src[i:i+4]):
            m = re.match(r"'(\\.|[^\\'])'", src[i:i+4]); i += len(m.group(0)); out.append("' '")
        elif c == "'" and src.startswith("'\\u{", i):
            j = src.find("}'", i); i = j + 2; out.append("' '")
        else:
            out.append(c); i += 1
    return ''.join(out)

def expand(tree):
    # expand a use tree "a::{b, c::{d,e}}" -> ["a::b","a::c::d",...]
    tree = tree.replace(' ', '').replace('\n', '')
    def parse(s, i, prefix):
        out = []; cur = ''
        while i < len(s):
            c = s[i]
            if c == '{':
                sub, i = parse(s, i + 1, prefix + cur)
                out += sub; cur = None
            elif c == '}':
                if cur: out.append(prefix + cur)
                return out, i + 1
            elif c == ',':
                if cur: out.append(prefix + cur)
                cur = ''; i += 1; continue
            else:
                if cur is None: cur = ''
                cur += c
            if c != '{': i += 1
        if cur: out.append(prefix + cur)
        return out, i
    return parse(tree, 0, '')[0]

def resolve(cur, path):
    parts = [p for p in path.split('::') if p]
    if not parts: return None
    # `super` is relative to the module (for foo.rs module foo, super = parent)
    mod = list(cur)
    if parts[0] == 'crate': mod = []; parts = parts[1:]
    elif parts[0] in ('super', 'self'):
        while parts and parts[0] in ('super', 'self'):
            if parts[0] == 'super': mod = mod[:-1]
            parts = parts[1:]
    elif tuple(mod + parts[:1]) in files and len(parts) > 1: pass  # a child module, relative
    else: return None
    full = mod + parts
    for n in range(len(full), -1, -1):
        if tuple(full[:n]) in files: return tuple(full[:n])
    return None

edges = defaultdict(set); why = defaultdict(list)
for m, rel in files.items():
    src = strip(open(os.path.join(root, rel)).read())
    paths = []
    for u in re.finditer(r'\buse\s+(\w+::[^;]*);', src):
        paths += expand(u.group(1))
    body = re.sub(r'\buse\s+[^;]*;', '', src)
    paths += re.findall(r'(?<![\w:])(\w+(?:::\w+)+)', body)
    for p in paths:
        t = resolve(m, p.replace('*', ''))
        # a child file reaching into its own parent (`super::*`) is one module split in files
        if t is not None and t != m and t != () and t != m[:len(t)]:
            # importing a parent mod.rs that only re-exports is still an edge
            edges[m].add(t); why[(m, t)].append(p)

# Tarjan
idx = {}; low = {}; st = []; on = set(); sccs = []; c = [0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
    for w in edges[v]:
        if w not in idx: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        sccs.append(comp)
for v in list(files): 
    if v not in idx: sc(v)
big = [s for s in sccs if len(s) > 1]
print(f'{root}: {len(files)} files, {sum(len(v) for v in edges.values())} edges, cycles: {[len(s) for s in big] or "none"}')
for s in big:
    ss = set(s)
    print('  SCC:', ', '.join(sorted(files[m] for m in s)))
    if verbose:
        for a in sorted(s):
            for b in sorted(edges[a] & ss):
                print(f'    {files[a]} -> {files[b]}: {sorted(set(why[(a,b)]))[:4]}')
sys.exit(1 if big else 0)
