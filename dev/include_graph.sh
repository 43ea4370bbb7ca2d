#!/usr/bin/env bash
# dev/include_graph.sh: the include graph between the folders of the code, from every
# tracked source file's `#include "..."` lines (a name resolves against the including
# file's folder first, then the repository root, as `-I.` does for nvcc and g++).
#
#   bash dev/include_graph.sh           prints the floors, lowest first: each folder with
#                                       the folders it includes and how many lines do so
#   bash dev/include_graph.sh --check   prints nothing and exits 1 (naming the folders)
#                                       if the folders include each other in a circle
#
# A file's floor is its folder, except: train_sft.c, train_sft.cu and chat.c at the root
# are the floor `(programs)`; the tests are one floor, `tests` (everything under tests/,
# and test_sft.c and test_sftcu.cu at the root), the top one that nothing includes.
# Includes within one floor are not edges.
set -u
cd "$(dirname "$0")/.." || exit 1
mode=${1:-print}

git ls-files -- '*.c' '*.h' '*.cu' '*.cuh' '*.cpp' | while read -r f; do
    grep -o '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*"' "$f" | sed 's/.*"\(.*\)"/\1/' |
        while read -r inc; do echo "$f $inc"; done
done | awk -v root="$PWD" '
function norm(p,    n, a, out, i, k, s) {   # a/b/../c -> a/c
    n = split(p, a, "/"); k = 0
    for (i = 1; i <= n; i++) {
        if (a[i] == "." || a[i] == "") continue
        if (a[i] == "..") { if (k > 0) k--; continue }
        out[++k] = a[i]
    }
    s = ""; for (i = 1; i <= k; i++) s = s (i > 1 ? "/" : "") out[i]
    return s
}
function dir(p) { return p ~ /\// ? substr(p, 1, match(p, /\/[^\/]*$/) - 1) : "." }
function floor_of(p,    d) {
    if (p ~ /^test_sft(cu)?\.(c|cu)$/ || p ~ /^tests\//) return "tests"
    d = dir(p); if (d == ".") return "(programs)"
    return d
}
function exists(p,    line) { return (getline line < (root "/" p)) >= 0 ? (close(root "/" p) || 1) : 0 }
{
    from = $1; inc = $2
    cand = norm(dir(from) "/" inc)
    if (!exists(cand)) cand = norm(inc)
    if (!exists(cand)) next                       # a system or generated header
    a = floor_of(from); b = floor_of(cand)
    if (a != b) edge[a SUBSEP b]++
    node[a] = 1; node[b] = 1
}
END {
    # floors: repeatedly take the folders whose includes are all placed already
    placed = 0; total = 0; for (n in node) total++
    level = 0
    while (placed < total) {
        got = ""
        for (n in node) {
            if (n in where) continue
            ok = 1
            for (e in edge) { split(e, ab, SUBSEP); if (ab[1] == n && !(ab[2] in where)) { ok = 0; break } }
            if (ok) got = got " " n
        }
        if (got == "") break
        m = split(got, g, " ")
        for (i = 1; i <= m; i++) if (g[i] != "") { where[g[i]] = level; placed++; fl[level] = fl[level] " " g[i] }
        level++
    }
    if (placed < total) {
        # peel off the folders no unplaced folder includes: what is left is the circle
        for (n in node) if (!(n in where)) left[n] = 1
        do {
            changed = 0
            for (n in left) {
                used = 0
                for (e in edge) { split(e, ab, SUBSEP); if (ab[2] == n && (ab[1] in left)) { used = 1; break } }
                if (!used) { delete left[n]; changed = 1 }
            }
        } while (changed)
        cyc = ""; for (n in left) cyc = cyc " " n
        print "include_graph: the folders" cyc " include each other in a circle" > "/dev/stderr"
        exit 1
    }
    if (mode == "--check") exit 0
    for (n in where) {
        printed = 0
        for (e in edge) { split(e, ab, SUBSEP); if (ab[1] == n) { print where[n] "\t" n "\t" ab[2] "(" edge[e] ")"; printed = 1 } }
        if (!printed) print where[n] "\t" n "\t"
    }
}' mode="$mode" | sort -t$'\t' -k1,1n -k2,2 -k3,3 | awk -F'\t' '
    $2 != last { if (NR > 1) print line; line = sprintf("floor %s  %-14s%s", $1, $2, $3 == "" ? "" : " includes"); last = $2 }
    $3 != "" { line = line " " $3 }
    END { if (NR) print line }'
exit "${PIPESTATUS[2]}"
