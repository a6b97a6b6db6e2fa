#!/usr/bin/env python3
"""Writes a SoyaPack with N tools and N egress entries, for bench/lint_bench.sh.

Usage: gen_manifest.py N OUTDIR

The mix (the same as lint_bench.cc builds in memory): of every 20 tools, 16 use an exact
entry, 2 are covered by a wildcard entry, 1 is an fs_write under /workdir/out, and 1 has
a port typo (a mismatch pair). One example exercises every 4th tool. Flow style keeps the
file small; 10k tools still exceed the parser's 1 MiB cap (kMaxManifestBytes), which the
benchmark reports and works around with lint_bench.
"""
import os
import sys


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    n = int(sys.argv[1])
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    tools, egress = [], []
    for i in range(n):
        k = i % 20
        if k < 16:
            tools.append(f"  t{i}: {{kind: builtin.http_get, url: 'https://h{i}.x.io/'}}")
            egress.append(f"  - {{host: h{i}.x.io, port: 443, protocol: https}}")
        elif k < 18:
            tools.append(f"  t{i}: {{kind: builtin.http_get, url: 'https://a.w{i}.x.io/'}}")
            egress.append(f"  - {{host: '*.w{i}.x.io', port: 443, protocol: https}}")
        elif k == 18:
            tools.append(f"  t{i}: {{kind: builtin.fs_write, path: /workdir/out/f{i}}}")
            egress.append(f"  - {{host: u{i}.x.io, port: 80, protocol: http}}")
        else:
            tools.append(f"  t{i}: {{kind: builtin.http_get, url: 'https://m{i}.x.io/'}}")
            egress.append(f"  - {{host: m{i}.x.io, port: 8443, protocol: https}}")
    ex_tools = ", ".join(f"t{i}" for i in range(0, n, 4))
    text = "\n".join([
        "soyapack: v0",
        f"name: bench-{n}",
        "version: 1.0.0",
        "agent: {runtime: python3, entrypoint: main.py}",
        "tools:",
        *tools,
        "capabilities:",
        " egress:",
        *egress,
        " fs: {read: [/workdir], write: [/workdir/out]}",
        " determinism_tier: read-only",
        "examples:",
        f"  - {{name: basic, tools: [{ex_tools}]}}",
        "",
    ])
    with open(os.path.join(out, "soyapack.yaml"), "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(out, "main.py"), "w", encoding="utf-8") as f:
        f.write("print('bench')\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
