#!/bin/sh
# Data flows one way, and no file grows past a reader's reach. Three checks:
#   scripts/check-layers.sh [BUILD_DIR]     (default build; run after make all)
# 1. Cycles. From the object files (nm: the global symbols each .o defines
#    and the ones it leaves undefined) it builds the file-level call graph
#    (a folder below a layer, such as src/launcher/docker/, counts as one
#    file, and so do src/kernel/kernel.c and its kernel_*.c parts), finds
#    its strongly connected components (a set of files that reach each
#    other: a cycle) and prints each with one cycle through it and the
#    symbols on its edges. A component is allowed when all its files are
#    on one line of scripts/layers-allow.txt (today's known cycles; remove
#    or shrink a line when you break a cycle).
# 2. Direction. scripts/layers.txt declares the order of the layers (the
#    folders of src/), lowest first: a file calls its own layer and those
#    below it, never one above (each such call is printed).
# 3. Size. No source file (C, headers, TypeScript, Python, JavaScript, shell;
#    src/, include/, tests/, scripts/) is over 800 lines, but for those listed
#    in scripts/size-allow.txt with their length when listed: a listed file
#    may only shrink (shorten its line, or remove it once under 800).
# Exit 1 when any check fails.
set -eu
build="${1:-build}"
cd "$(dirname "$0")/.."
objs=$(find "$build/src" -name '*.o' ! -name 'web_assets.o' 2>/dev/null | sort)
[ -n "$objs" ] || { echo "check-layers: no object files under $build/src (run make all first)" >&2; exit 2; }
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for o in $objs; do
    src=${o#"$build"/}
    src=${src%.o}.c
    [ -f "$src" ] || continue  # a stale object of a file moved away
    # A folder below a layer (src/launcher/docker/) is one object split by
    # concern: its files share a private header and may call each other;
    # it is one node of the graph.
    # So is a file pair's object split flat (src/kernel/kernel.c with
    # kernel_exec.c, kernel_io.c...: NAME.c and NAME_PART.c beside it).
    case $src in
    src/*/*/*) src=${src%/*}/ ;;
    src/*/*_*.c)
        base=${src%%_*}
        case $base in */*/*) [ -f "$base.c" ] && src=$base.c ;; esac ;;
    esac
    nm --defined-only -g "$o" | awk -v f="$src" 'NF >= 3 { print "D", f, $3 }'
    nm -u "$o" | awk -v f="$src" '{ print "U", f, $NF }'
done > "$tmp"
exec python3 - "$tmp" scripts/layers-allow.txt scripts/layers.txt scripts/size-allow.txt <<'PY'
import sys, os, subprocess, collections
facts, allow_path, order_path, size_path = sys.argv[1:5]
defs, uses = {}, collections.defaultdict(set)
for line in open(facts):
    kind, f, sym = line.split()
    if kind == "D":
        defs.setdefault(sym, f)
    else:
        uses[f].add(sym)
files = sorted(set(defs.values()) | set(uses))
edges = collections.defaultdict(lambda: collections.defaultdict(set))
for f in files:
    for s in uses.get(f, ()):
        g = defs.get(s)
        if g and g != f:
            edges[f][g].add(s)
# Tarjan's strongly connected components (iterative)
index, low, on, stack, sccs, n = {}, {}, set(), [], [], [0]
def strong(v):
    work = [(v, iter(sorted(edges[v])))]
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
    while work:
        u, it = work[-1]
        for w in it:
            if w not in index:
                index[w] = low[w] = n[0]; n[0] += 1; stack.append(w); on.add(w)
                work.append((w, iter(sorted(edges[w]))))
                break
            if w in on:
                low[u] = min(low[u], index[w])
        else:
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[u])
            if low[u] == index[u]:
                comp = []
                while True:
                    w = stack.pop(); on.discard(w); comp.append(w)
                    if w == u:
                        break
                if len(comp) > 1:
                    sccs.append(sorted(comp))
for f in files:
    if f not in index:
        strong(f)
allowed = []
try:
    for line in open(allow_path):
        line = line.split("#", 1)[0].split()
        if line:
            allowed.append(set(line))
except FileNotFoundError:
    pass
def cycle(comp):
    # shortest cycle through comp[0] inside the component (BFS)
    inside, start = set(comp), comp[0]
    prev, queue = {start: None}, [start]
    for u in queue:
        for w in sorted(edges[u]):
            if w not in inside:
                continue
            if w == start:
                path = [u]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w not in prev:
                prev[w] = u; queue.append(w)
    return comp
bad = 0
for comp in sorted(sccs):
    ok = any(set(comp) <= a for a in allowed)
    bad += not ok
    print("%s cycle among %d files: %s" % ("allowed" if ok else "error:", len(comp), " ".join(comp)))
    mutual = [(a, b) for a in comp for b in comp if a < b and b in edges[a] and a in edges[b]]
    if mutual:
        print("    files calling each other: " + ", ".join("%s <-> %s" % (a.rsplit("/", 1)[-1], b.rsplit("/", 1)[-1])
                                                      for a, b in mutual))
    c = cycle(comp)
    for a, b in zip(c, c[1:]):
        syms = sorted(edges[a][b])
        print("    %s -> %s (%s%s)" % (a, b, ", ".join(syms[:3]), ", ..." if len(syms) > 3 else ""))
unused = [a for a in allowed if not any(set(c) & a for c in sccs)]
for a in unused:
    print("note: scripts/layers-allow.txt lists a cycle that is gone: %s (remove the line)" % " ".join(sorted(a)))

# 2. direction
def words(path):
    out = []
    for line in open(path):
        out += line.split("#", 1)[0].split()
    return out
order = words(order_path)
rank = {name: i for i, name in enumerate(order)}
up = 0
for f in files:
    lf = f.split("/")[1]
    if lf not in rank:
        print("error: %s is in layer '%s', which %s does not name" % (f, lf, order_path))
        up += 1
        continue
    for g in sorted(edges[f]):
        lg = g.split("/")[1]
        if lg in rank and rank[lg] > rank[lf]:
            syms = sorted(edges[f][g])
            print("error: %s (layer %s) calls up into %s (layer %s): %s%s" % (f, lf, g, lg, ", ".join(syms[:3]),
                                                                            ", ..." if len(syms) > 3 else ""))
            up += 1

# 3. size
LIMIT = 800
EXTS = (".c", ".h", ".ts", ".py", ".js", ".mjs", ".sh")
listed = {}
for line in open(size_path):
    line = line.split("#", 1)[0].split()
    if len(line) == 2:
        listed[line[0]] = int(line[1])
tracked = subprocess.run(["git", "ls-files", "src", "include", "tests", "scripts"], capture_output=True, text=True)
paths = tracked.stdout.split() if tracked.returncode == 0 else []
big = 0
for path in sorted(set(paths) | set(listed)):
    if not path.endswith(EXTS) or not os.path.isfile(path):
        if path in listed:
            print("note: %s lists '%s', which is gone (remove the line)" % (size_path, path))
        continue
    with open(path, "rb") as fh:
        n = sum(1 for _ in fh)
    if path in listed:
        if n > listed[path]:
            print("error: %s has %d lines, more than the %d %s allows it (it may only shrink: put new code in "
                  "a new file)" % (path, n, listed[path], size_path))
            big += 1
        elif n <= LIMIT:
            print("note: %s is %d lines now, under %d: remove its line from %s" % (path, n, LIMIT, size_path))
        elif n < listed[path]:
            print("note: %s is %d lines now: lower its line in %s to %d" % (path, n, size_path, n))
    elif n > LIMIT:
        print("error: %s has %d lines, over %d (split it by concern)" % (path, n, LIMIT))
        big += 1
print("check-layers: %d files, %d cycles, %d not allowed, %d calls up, %d files too long" % (len(files), len(sccs),
                                                                                       bad, up, big))
sys.exit(1 if bad or up or big else 0)
PY
