#!/usr/bin/env python3
"""convert.py SRC_REPO DST: copies the repository (without .git, out/, *.o) to DST and
rewrites its .cu/.cuh files for the emulator: kernel launches `k<<<cfg>>>(args)` become
emu::launch calls, kernels with __launch_bounds__(N) check their launch against N,
`__shared__ T a[N];` becomes static storage poisoned (0xFF) once per block
through emu::shared_touch, and `extern __shared__ T name[];` a pointer to the dynamic
shared memory of the launch."""
import os, re, shutil, sys

src, dst = sys.argv[1], sys.argv[2]
if os.path.exists(dst):
    shutil.rmtree(dst)
shutil.copytree(src, dst, ignore=shutil.ignore_patterns('.git', 'out', '*.o', 'node_modules'), symlinks=True)

def find_close(s, i):
    """index of the ')' matching the '(' at s[i]"""
    depth = 0
    while True:
        c = s[i]
        if c == '(':
            depth += 1
        elif c == ')':
            depth -= 1
            if depth == 0:
                return i
        i += 1

def split_args(a):
    """the top-level comma-separated pieces of an argument list"""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(a):
        if c in '([{':
            depth += 1
        elif c in ')]}':
            depth -= 1
        elif c == ',' and depth == 0:
            parts.append(a[start:i])
            start = i + 1
    if a.strip():
        parts.append(a[start:])
    return parts

attr_kernels = set()
files = []
for root, _, names in os.walk(dst):
    for n in names:
        if n.endswith(('.cu', '.cuh')):
            files.append(os.path.join(root, n))
for f in files:
    for m in re.finditer(r'cudaFuncSetAttribute\(\s*([A-Za-z_]\w*)', open(f).read()):
        attr_kernels.add(m.group(1))

launch_re = re.compile(r'([A-Za-z_]\w*)\s*(<[^<>;()]*>)?\s*<<<(.*?)>>>\s*\(', re.S)
count = 0
for f in files:
    s = open(f).read()
    out, pos = [], 0
    while True:
        m = launch_re.search(s, pos)
        if not m:
            break
        name, targs, cfg = m.group(1), m.group(2) or '', m.group(3)
        open_paren = m.end() - 1
        close = find_close(s, open_paren)
        args = s[open_paren + 1:close]
        kern = name + targs
        addr = '(const void *)&' + kern if name in attr_kernels else 'nullptr'
        out.append(s[pos:m.start()])
        # the arguments are evaluated at the launch, as on a GPU, not when the queued kernel
        # runs (behind a collective the host may have changed what they read by then)
        parts = split_args(args)
        caps = ''.join(', _emu_a%d = (%s)' % (i, p.strip()) for i, p in enumerate(parts))
        call = ', '.join('_emu_a%d' % i for i in range(len(parts)))
        out.append('emu::launch(emu::LaunchCfg(%s), %s, "%s", [=%s]() { %s(%s); })' % (cfg, addr, kern.replace('"', ''), caps, kern, call))
        pos = close + 1
        count += 1
    out.append(s[pos:])
    s = ''.join(out)
    # __launch_bounds__(N, ...) kernels check every launch against N (the hardware refuses
    # more threads; dev/cuda/resources.sh relies on the bound)
    lb_out, lpos = [], 0
    for m in re.finditer(r'__launch_bounds__\(([^()]*(?:\([^()]*\)[^()]*)*)\)\s*(\w+)\s*\(', s):
        if m.start() < lpos:
            continue
        close = find_close(s, m.end() - 1)
        brace = s.index('{', close)
        if s[close + 1:brace].strip():  # a declaration, not a definition
            continue
        bound = m.group(1).split(',')[0]
        lb_out.append(s[lpos:brace + 1])
        lb_out.append(' emu::check_launch_bounds(%s);' % bound)
        lpos = brace + 1
    lb_out.append(s[lpos:])
    s = ''.join(lb_out)
    s = re.sub(r'extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([\w:]+)\s+(\w+)\s*\[\s*\]\s*;', r'\1 *\2 = (\1 *)emu::dyn_smem;', s)
    def shared_decl(m):
        names = [re.match(r'\s*(\w+)', d).group(1) for d in m.group(3).split(',')]
        touch = ' '.join('emu::shared_touch(&%s, sizeof %s);' % (n, n) for n in names)
        return '%sstatic %s %s; %s' % (m.group(1), m.group(2), m.group(3), touch)
    s = re.sub(r'^(\s*)__shared__\s+([\w:]+)\s+([^;]+);', shared_decl, s, flags=re.M)
    open(f, 'w').write(s)
print('rewrote %d launches; kernels with a smem attribute: %s' % (count, ' '.join(sorted(attr_kernels))), file=sys.stderr)
