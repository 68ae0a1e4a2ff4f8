#!/usr/bin/env python3
"""Two or more builds of the module side by side under callgrind, in one run: connection mode
with the exchange tracker (the example's default), a direct response, 2 000 keep-alive requests
over 4 connections after warm-up, HTTP/1.1 and HTTP/2, h2load's minimal heads and browser-like
heads (bench.py's BROWSER_HEADS). For each case the builds run one after the other (interleaved
by case, not build after build), and each prints instructions per request: the whole process,
the module's hooks (inclusive: its code and the Envoy callbacks it makes), with --functions the
module's own functions (exclusive and inclusive), heaviest first, and with --lines NAME the
source lines of the functions whose name holds NAME (exclusive; code inlined into them counted
at its own file and line), heaviest first.

    cargo build --release --lib && cp target/release/libgraceful_drain.so /tmp/new/
    git worktree add /tmp/old-tree <commit> && (cd /tmp/old-tree && cargo build --release --lib)
    python3 bench/compare.py old=/tmp/old-tree/target/release new=/tmp/new --functions
    python3 bench/compare.py new=/tmp/new --lines on_network_filter_write

Callgrind counts instructions, so the figures do not depend on the machine's load; the process
total still moves by a few hundred instructions a request between runs (Envoy's own timers and
caches), the module's hooks by a handful. Uses bench.py's Envoy, gateway rendering and
callgrind parsing."""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def own(name):
    """The module's code: its functions and exported hooks (not Envoy's callbacks it calls)."""
    return "graceful_drain" in name or name.startswith("envoy_dynamic_module_on_")


def callgrind_lines(dump, name):
    """Exclusive instructions by source line (file, line) of the functions whose name holds
    `name`, from a callgrind dump: a line of code inlined into them is counted at its own file
    (`fi=`/`fe=`), not at the function's. Calls' costs (the line after `calls=`) are left out."""
    fns, files = {}, {}
    fn = fl = cur = None
    pos, pending, cost = 0, False, {}
    for line in open(dump):
        key, _, rest = line.partition("=")
        if key == "fn":
            fn, cur = bench.compressed_name(fns, rest.strip()), fl
        elif key == "fl":
            fl = cur = bench.compressed_name(files, rest.strip())
        elif key in ("fi", "fe"):
            cur = bench.compressed_name(files, rest.strip())
        elif key in ("cfi", "cfl"):
            bench.compressed_name(files, rest.strip())
        elif key == "cfn":
            bench.compressed_name(fns, rest.strip())
        elif key == "calls":
            pending = True
        elif line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            p = parts[0]
            pos = pos + int(p[1:]) if p[0] == "+" else pos - int(p[1:]) if p[0] == "-" else (
                pos if p == "*" else int(p))
            if pending:
                pending = False
            elif fn is not None and name in fn and len(parts) > 1:
                where = (re.sub(r"^.*?/(src|library)/", r"\1/", cur or "?"), pos)
                cost[where] = cost.get(where, 0) + int(parts[1])
    return cost


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="+", help="name=directory holding libgraceful_drain.so")
    ap.add_argument("--n", type=int, default=2000, help="requests measured per case")
    ap.add_argument("--functions", action="store_true", help="the module's functions, per build")
    ap.add_argument("--lines", metavar="NAME", help="the source lines of the functions whose name holds NAME")
    ap.add_argument("--top", type=int, default=14)
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args()
    builds = dict(b.split("=", 1) for b in args.builds)
    for d in builds.values():
        if not os.path.exists(os.path.join(d, "libgraceful_drain.so")):
            sys.exit(f"no libgraceful_drain.so in {d}")
    binary = bench.envoy_bin()
    init = bench.Envoy.__init__
    keep_hooks = bench.hook_instructions
    out = {}
    for browser in (False, True):
        for h1 in (True, False):
            case = f"{'HTTP/1.1' if h1 else 'HTTP/2'}, {'browser' if browser else 'h2load'} heads"
            for name, d in builds.items():
                # Envoy.__init__'s last default is the module directory.
                init.__defaults__ = init.__defaults__[:-1] + (d,)
                functions = {}

                lines = {}

                def hooks(dump, n, functions=functions, lines=lines):
                    if args.lines:
                        lines.update({k: v / n for k, v in callgrind_lines(dump, args.lines).items()})
                    for f, (s, i) in bench.callgrind_functions(dump).items():
                        if own(f) and s:
                            functions[f] = (s / n, i / n)
                    return keep_hooks(dump, n)

                bench.hook_instructions = hooks
                total, ours, by_hook = bench.callgrind_run(binary, True, h1, args.n, http_filter=False,
                                                           track_requests=True, browser=browser)
                out.setdefault(case, {})[name] = {"total": total, "hooks": ours, "by_hook": by_hook,
                                                  "functions": functions}
                hook_text = ", ".join(f"{k.replace('network_filter_', '')} {v:.0f}"
                                      for k, v in sorted(by_hook.items()) if v >= 1)
                print(f"{case:28} {name:10} total {total:9.0f}  module's hooks {ours:6.0f} ({hook_text})",
                      flush=True)
                if args.functions:
                    own_total = sum(s for s, _ in functions.values())
                    print(f"{'':39} the module's own code: {own_total:.0f} (exclusive, callbacks apart)")
                    for f, (s, i) in sorted(functions.items(), key=lambda kv: -kv[1][0])[:args.top]:
                        f = re.sub(r"graceful_drain::", "", f)
                        print(f"{'':39} {s:7.0f} {i:7.0f}  {f[:100]}")
                if args.lines:
                    print(f"{'':39} {args.lines}, by source line: {sum(lines.values()):.0f} (exclusive)")
                    for (f, ln), c in sorted(lines.items(), key=lambda kv: -kv[1])[:args.top]:
                        print(f"{'':39} {c:7.1f}  {f}:{ln}")
            names = list(builds)
            if len(names) > 1:
                a = out[case][names[0]]
                for n in names[1:]:
                    b = out[case][n]
                    print(f"{'':28} {n} - {names[0]}: total {b['total'] - a['total']:+.0f}, "
                          f"module's hooks {b['hooks'] - a['hooks']:+.0f}", flush=True)
    bench.hook_instructions = keep_hooks
    if args.json:
        json.dump(out, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
