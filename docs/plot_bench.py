#!/usr/bin/python3
"""Chart nibble-bench results: weight GB/s of every product kernel against the memory-bandwidth
roofline and the fp32 OpenBLAS / Eigen baselines.

Usage:
    nibble-bench --benchmark_format=json > bench.json      (or --benchmark_out=bench.json)
    /usr/bin/python3 docs/plot_bench.py bench.json [-o docs/bench.png] [--metric flops]

One subplot per (n, shape): horizontal bars of weight bytes/s (bytes_per_second) for each
format/implementation, one bar per thread count; dashed vertical lines mark the measured memory
read bandwidth (membw) at each thread count. With repetitions, the median aggregate is used.
Needs matplotlib (Debian: apt-get install -y python3-matplotlib).
"""

import argparse
import json
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def parse_name(name):
    """Splits kernel/format/impl/shape[/n:N]/threads:T[/cache][/real_time] into a dict."""
    out = {"n": None, "threads": 1, "cache": ""}
    plain = []
    for tok in name.split("/"):
        if tok.startswith("n:"):
            out["n"] = int(tok[2:])
        elif tok.startswith("threads:"):
            out["threads"] = int(tok[8:])
        elif tok == "real_time":
            pass
        else:
            plain.append(tok)
    plain += [""] * (5 - len(plain))
    out["kernel"], out["format"], out["impl"], out["shape"] = plain[:4]
    if plain[4]:
        out["cache"] = plain[4]
    return out


def load(path):
    """Returns {base name: benchmark entry}, preferring the median aggregate."""
    with open(path) if path != "-" else sys.stdin as f:
        data = json.load(f)
    runs = defaultdict(list)
    medians = {}
    for b in data.get("benchmarks", []):
        if b.get("error_occurred"):
            continue
        base = b.get("run_name", b["name"])
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                medians[base] = b
        else:
            runs[base].append(b)
    best = {}
    for base, lst in runs.items():
        lst = sorted(lst, key=lambda b: b["real_time"])
        best[base] = lst[len(lst) // 2]
    best.update(medians)
    return data.get("context", {}), best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="nibble-bench JSON output ('-' for stdin)")
    ap.add_argument("--metric", choices=["gbs", "flops"], default="gbs",
                    help="bar length: weight GB/s (default) or GFLOP/s (the roofline is drawn "
                         "only for GB/s)")
    ap.add_argument("-o", "--output",
                    default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench.png"))
    args = ap.parse_args()

    context, best = load(args.json)
    roof = {}  # threads -> GB/s
    products = defaultdict(lambda: defaultdict(dict))  # (n, shape) -> label -> threads -> GB/s
    for name, b in best.items():
        k = parse_name(name)
        gbs = b.get("bytes_per_second", 0.0) / 1e9
        val = gbs if args.metric == "gbs" else b.get("FLOP/s", 0.0) / 1e9
        if k["kernel"] == "membw":
            roof[k["threads"]] = gbs
        elif k["kernel"] in ("gemv", "gemm") and val > 0 and not k["cache"].startswith("warm_l"):
            # (the warm_l2 / warm_l3 GEMV rows are cache-resident ceilings: in the summary table)
            products[(k["n"], k["shape"])][k["format"] + "/" + k["impl"]][k["threads"]] = val
    if not products:
        sys.exit("plot_bench.py: no successful gemv/gemm results in " + args.json)

    ns = sorted({n for n, _ in products})
    shapes = sorted({s for _, s in products},
                    key=lambda s: tuple(int(v) for v in s.split("x")))
    threads = sorted({t for p in products.values() for d in p.values() for t in d})
    nmax = max(len(p) for p in products.values())
    fig, axes = plt.subplots(len(ns), len(shapes), squeeze=False,
                             figsize=(4.6 * len(shapes), 0.32 * nmax * len(ns) + 1.5 * len(ns)))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    height = 0.8 / max(1, len(threads))
    for i, n in enumerate(ns):
        for j, shape in enumerate(shapes):
            ax = axes[i][j]
            data = products.get((n, shape), {})
            labels = sorted(data, key=lambda l: (l.split("/")[1] in ("openblas", "eigen"), l))
            for ti, t in enumerate(threads):
                ys = [y + ti * height for y in range(len(labels))]
                vals = [data[l].get(t, 0.0) for l in labels]
                bars = ax.barh(ys, vals, height=height, color=colors[ti % len(colors)],
                               label=f"{t} thread(s)")
                for bar, l in zip(bars, labels):
                    if l.split("/")[1] in ("openblas", "eigen"):
                        bar.set_hatch("//")
            for ti, t in enumerate(threads):
                if n == 1 and t in roof and args.metric == "gbs":
                    ax.axvline(roof[t], color=colors[ti % len(colors)], linestyle="--",
                               linewidth=1, label=f"memory read, {t} thr ({roof[t]:.1f} GB/s)")
            ax.set_yticks([y + height * (len(threads) - 1) / 2 for y in range(len(labels))])
            ax.set_yticklabels(labels, fontsize=7)
            ax.invert_yaxis()
            cache = "cold" if n == 1 else "warm"
            ax.set_title(f"{'gemv' if n == 1 else 'gemm'} {shape} n={n} ({cache})", fontsize=9)
            ax.set_xlabel("weight GB/s" if args.metric == "gbs" else "GFLOP/s", fontsize=8)
            ax.tick_params(axis="x", labelsize=7)
            ax.grid(axis="x", alpha=0.3)
            if i == 0 and j == 0:
                ax.legend(fontsize=6, loc="lower right")
    cpu = context.get("host_name", "")
    what = "weight bytes/s" if args.metric == "gbs" else "FLOP/s"
    fig.suptitle(f"nibble-bench: {what} per kernel (hatched: fp32 baselines; dashed: "
                 f"memory read roofline) {cpu}", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(args.output, dpi=110)
    print("wrote", args.output)


if __name__ == "__main__":
    main()
