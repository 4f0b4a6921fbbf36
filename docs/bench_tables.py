#!/usr/bin/env python3
"""Markdown tables of a nibble-bench JSON run (docs/benchmarks.md, "Latest results").

    ./build/nibble-bench --summary --benchmark_out=bench.json --benchmark_out_format=json
    /usr/bin/python3 docs/bench_tables.py bench.json
    /usr/bin/python3 docs/bench_tables.py medians.json bench.json   # two runs, one table

With several files, a row measured in more than one of them is taken from the first that has it
(the run context too): e.g. the cold rows and the bandwidth from a run with repetitions, the warm
rows and prefill from a summary run.

Prints, from that one run: the memory read bandwidth (membw rows), the cold GEMV of every
format and ISA at 1 and 2 threads with its ratio to the bandwidth at the same thread count (the
row's own paired read sweeps of its weights, counter x_membw, when the run has them; else the
run's membw row), the warm (L2- and LLC-resident) GEMV at 1 thread, the model decode step, and prefill
(gemm, n = 64) in GFLOP/s. When the run has repetitions, the medians are used.
"""

import json
import re
import sys
from collections import OrderedDict

NAME = re.compile(
    r"^(?P<kernel>gemv|gemm)/(?P<fmt>[^/]+)/(?P<impl>[^/]+)/(?P<shape>\d+x\d+)/n:(?P<n>\d+)/"
    r"threads:(?P<t>\d+)/(?P<mode>[a-z0-9_]+)"
)
ISA_ORDER = ["avx512", "avxvnni", "avx2", "neon", "scalar"]
# nibble-bench's weight formats in its own order (bench/common.cpp); others after them.
FORMAT_ORDER = ["f32", "f16", "q8_0", "q4_K", "q5_K", "q6_K", "nf4", "fp4", "bf16", "q4_0", "q4_1",
                "q5_0", "q5_1", "q2_K", "q3_K", "iq4_nl", "iq4_xs", "mxfp4", "w8a8"]


def load(path):
    with open(path) as f:
        data = json.load(f)
    rows = OrderedDict()
    for b in data["benchmarks"]:
        if b.get("error_occurred"):
            continue
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = b.get("run_name", b["name"])
        if b.get("run_type") == "iteration" and name in rows and rows[name].get("_median"):
            continue
        rec = dict(b)
        rec["_median"] = b.get("run_type") == "aggregate"
        rows[name] = rec
    return data.get("context", {}), rows


def gbs(rec):
    return rec["bytes_per_second"] / 1e9


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: bench_tables.py BENCH.json [MORE.json ...]")
    ctx, rows = load(sys.argv[1])
    for path in sys.argv[2:]:
        for name, rec in load(path)[1].items():
            rows.setdefault(name, rec)
    membw = {}
    for name, rec in rows.items():
        m = re.match(r"^membw/read/sum/[^/]+/threads:(\d+)/", name)
        if m:
            membw[int(m.group(1))] = gbs(rec)
    print(f"Run: {ctx.get('date', '?')}, {ctx.get('num_cpus', '?')} CPUs, "
          f"nibble ISAs {ctx.get('nibble_isas', '?')}, load average {ctx.get('load_avg', '?')}")
    print()
    print("| threads | membw (GB/s) |")
    print("|---|---|")
    for t in sorted(membw):
        print(f"| {t} | {membw[t]:.1f} |")
    print()

    # Decode: cold and warm GEMV.
    gemv = OrderedDict()  # (fmt, impl) -> {(t, mode): GB/s}
    shape_cold = None
    for name, rec in rows.items():
        m = NAME.match(name)
        if not m or m["kernel"] != "gemv" or m["n"] != "1":
            continue
        if m["mode"] == "cold":
            if shape_cold is None:
                shape_cold = m["shape"]
            if m["shape"] != shape_cold:
                continue
        cell = gemv.setdefault((m["fmt"], m["impl"]), {})
        cell[(int(m["t"]), m["mode"])] = gbs(rec)
        if m["mode"] == "cold" and rec.get("x_membw"):
            cell[(int(m["t"]), "x_membw")] = rec["x_membw"]

    def fmt_rank(fmt):
        base = fmt.replace(".x16", "")
        return FORMAT_ORDER.index(base) if base in FORMAT_ORDER else len(FORMAT_ORDER)

    def order(key):
        fmt, impl = key
        isa = ISA_ORDER.index(impl) if impl in ISA_ORDER else len(ISA_ORDER)
        return (fmt_rank(fmt), isa, fmt.endswith(".x16"))

    print(f"Decode, GB/s of weights ({shape_cold}; cold/membw: the ratio to the bandwidth at the "
          "same thread count, paired per row (x_membw) when measured; warm: 1 thread, cache-resident weights):")
    print()
    print("| format | impl | 1 thread | cold/membw | 2 threads | cold/membw | warm L2 | warm L3 |")
    print("|---|---|---|---|---|---|---|---|")
    for key in sorted(gemv, key=order):
        fmt, impl = key
        if impl == "scalar":
            continue
        v = gemv[key]
        cells = [fmt, impl]
        for t in (1, 2):
            c = v.get((t, "cold"))
            cells.append(f"{c:.1f}" if c else "")
            x = v.get((t, "x_membw"))
            cells.append(f"{x:.2f}" if x else f"{c / membw[t]:.2f}" if c and t in membw else "")
        for mode in ("warm_l2", "warm_l3"):
            w = v.get((1, mode))
            cells.append(f"{w:.1f}" if w else "")
        print("| " + " | ".join(cells) + " |")
    print()

    # Model decode step.
    dec = sorted(((n, r) for n, r in rows.items() if n.startswith("decode/")),
                 key=lambda nr: (int(re.search(r"threads:(\d+)", nr[0]).group(1)), nr[0]))
    if dec:
        print("Model decode step:")
        print()
        print("| stack | impl | threads | ms/token | tokens/s | weight GB/s | % membw |")
        print("|---|---|---|---|---|---|---|")
        for name, rec in dec:
            parts = name.split("/")
            t = int(re.search(r"threads:(\d+)", name).group(1))
            g = gbs(rec)
            pct = (f"{100 * rec['x_membw']:.0f} %" if rec.get("x_membw") else
                   f"{100 * g / membw[t]:.0f} %" if t in membw else "")
            print(f"| {parts[1]} | {parts[2]} | {t} | {rec['real_time']:.1f} | "
                  f"{rec['tokens/s']:.1f} | {g:.1f} | {pct} |")
        print()

    # Prefill.
    pre = OrderedDict()
    impls = []
    for name, rec in rows.items():
        m = NAME.match(name)
        if not m or m["kernel"] != "gemm" or m["n"] != "64" or m["t"] != "1":
            continue
        pre.setdefault(m["fmt"], {})[m["impl"]] = rec["FLOP/s"] / 1e9
        if m["impl"] not in impls:
            impls.append(m["impl"])
    if pre:
        impls.sort(key=lambda i: ISA_ORDER.index(i) if i in ISA_ORDER else len(ISA_ORDER))
        print("Prefill, gemm n = 64, 1 thread, GFLOP/s:")
        print()
        print("| format | " + " | ".join(impls) + " |")
        print("|---|" + "---|" * len(impls))
        for fmt, v in sorted(pre.items(), key=lambda kv: (fmt_rank(kv[0]), kv[0])):
            print(f"| {fmt} | " + " | ".join(f"{v[i]:.0f}" if i in v else "" for i in impls) + " |")


if __name__ == "__main__":
    main()
