"""Tables and pictures for lesson 10's notebook (printing only; the numbers come from model, budget, ring and the
torchrun tasks)."""
from __future__ import annotations

from gpucourse.tables import table
from . import ring

MiB = 1 << 20


def mib(b: float) -> str:
    return f"{b / MiB:,.1f}"


def size_label(b: float) -> str:
    """A message size as the comm table shows it: "256 KiB", "4 MiB"."""
    return f"{b / MiB:g} MiB" if b >= MiB else f"{b / 1024:g} KiB"


def budget_table(res: dict, timed: bool) -> None:
    """One row per mode: predicted and measured parameters + gradients + AdamW state, activations, peak (MiB)."""
    head = f"{'mode':<27}{'weights+grads+AdamW':>21}{'activations':>22}{'peak':>27}"
    head += f"{'step ms':>9}" if timed else ""
    print(head)
    print(f"{'':<27}{'predicted  measured':>21}{'predicted  measured':>22}{'predicted  measured  ratio':>27}")
    for name, p in res["points"].items():
        m, q = p["measured"], p["predicted"]
        static_m = m["parameters"] + m["gradients"] + m["optimizer"]
        static_q = q["parameters"] + q["gradients"] + q["optimizer"]
        pk = p["predicted_peak"]["peak"]
        row = (f"{name:<27}{mib(static_q):>11} {mib(static_m):>9}{mib(q['activations']):>12} "
               f"{mib(m['activations']):>9}{mib(pk):>12} {mib(m['peak']):>9} {pk / m['peak']:>6.3f}")
        if timed:
            row += f"{p['step_ms']:>9.1f}"
        print(row)


def plot_timeline(tl: dict, title: str):
    import matplotlib.pyplot as plt

    ys = [b / MiB for b in tl["bytes"]]
    fig, ax = plt.subplots(figsize=(9, 3.2))
    ax.plot(range(len(ys)), ys, lw=1.2)
    for label, i in tl["marks"].items():
        if i is not None:
            ax.axvline(i, color="gray", ls="--", lw=0.8)
            ax.text(i, max(ys) * 0.98, " " + label, va="top", fontsize=8, color="gray")
    ax.set_xlabel("allocator event" if "allocator" in tl["source"] else "torch operation")
    ax.set_ylabel("MiB allocated")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def comm_table(res: dict) -> dict:
    """Print all-reduce time and bus bandwidth per size, and the latency + size / bandwidth fit; returns the fit."""
    world = res["world"]
    fit = ring.fit_latency_bandwidth(res["sizes_bytes"], res["all_reduce_s"], world)
    rows = [(s, t * 1e6, ring.bus_bandwidth(s, t, world), m * 1e6)
            for s, t, m in zip(res["sizes_bytes"], res["all_reduce_s"], fit["model_s"])]
    print(table(rows, ["size", "time (us)", "bus GB/s", "model (us)"], [size_label, ".1f", ".2f", ".1f"],
                [10, 12, 10, 12], title=f"all-reduce of float32 over {world} ranks ({res['backend']}, "
                                        f"{res['device_name']})"))
    print(f"fit: t = {fit['alpha_s'] * 1e6:.1f} us + 2(N-1)/N * size / ({fit['beta_GBps']:.2f} GB/s)")
    rv = res["ring_vs_all_reduce"]
    for key, what in (("ring_s", "ring from sends"), ("bidirectional_ring_s", "two rings from sends")):
        if key in rv:
            print(f"{what} vs dist.all_reduce at {rv['bytes'] / MiB:g} MiB: {rv[key] * 1e3:.2f} ms vs "
                  f"{rv['all_reduce_s'] * 1e3:.2f} ms ({rv['all_reduce_s'] / rv[key]:.2f}x all_reduce's speed)")
    st = res.get("ring_step")
    if st:  # the ring's floor: 2 (N - 1) steps, each a transfer and (in half of them) an addition
        steps = 2 * (world - 1)
        one = steps * st["one_neighbour_s"] + (world - 1) * st["add_s"]
        two = steps * st["two_neighbours_s"] + (world - 1) * st["add_s"]
        print(f"one step alone, {st['chunk_bytes'] / MiB:g} MiB: to one neighbour {st['one_neighbour_s'] * 1e3:.3f} ms "
              f"({st['chunk_bytes'] / st['one_neighbour_s'] / 1e9:.0f} GB/s), split between both "
              f"{st['two_neighbours_s'] * 1e3:.3f} ms, the addition {st['add_s'] * 1e3:.3f} ms")
        print(f"the ring's floor from those steps: {one * 1e3:.2f} ms (one ring), {two * 1e3:.2f} ms (two rings)")
    return fit


def ddp_table(res: dict) -> None:
    """DDP's settings side by side: step time, weak-scaling efficiency, and (GPU) how long the host takes to issue
    a step."""
    host_ms = {k: s * 1e3 for k, s in res.get("host_s", {}).items()}
    rows = [("alone (no DDP)", res["alone_s"] * 1e3, 1, host_ms.get("alone"))]
    for name, t in res.get("variants_s", {res.get("ddp_variant", "DDP"): res["ddp_s"]}).items():
        rows.append(("DDP " + name, t * 1e3, res["alone_s"] / t, host_ms.get(name)))
    c = res.get("compiled", {})
    if "ddp_s" in c:  # torch.compile on both sides
        for name, key in (("alone, compiled", "alone"), ("DDP " + res["ddp_variant"] + ", compiled", "ddp")):
            rows.append((name, c[key + "_s"] * 1e3, c["alone_s"] / c[key + "_s"], c["host_s"][key] * 1e3))
    print(table(rows, ["", "step ms", "efficiency", "host ms"], [None, ".1f", ".3f", ".1f"], [44, 9, 12, 9],
                missing=""))


def fsdp_table(res: dict) -> None:
    """Per regime and kind: the states held per rank (predicted by the lesson's budget, divided by N where FSDP2
    shards, against measured), and on a GPU the peak, the step and the host's time to issue it, each against DDP's."""
    from . import budget

    world = res["world"]
    for regime in [k for k in ("activations", "states", "states_wide") if k in res]:
        cfg = res[regime + "_config"]
        b = budget.predict(cfg)
        states = b["parameters"] + b["gradients"] + b["optimizer"]
        d = res[regime]["ddp"]
        timed = "peak_bytes" in d  # on a GPU: peaks, and the host's time to issue a step
        rows = []
        for kind, r in res[regime].items():
            row = (kind, states if kind == "ddp" else states / world, sum(r["held_bytes"].values()))
            if timed:
                peak = r.get("peak_bytes")
                row += (peak, None if peak is None else peak / d["peak_bytes"], r["step_s"] * 1e3,
                        r["step_s"] / d["step_s"], r["host_s"] * 1e3)
            else:
                row += (r["step_s"] * 1e3,)
            rows.append(row)
        columns = ["", "states pred", "measured"] + (["peak", "vs DDP", "step ms", "vs DDP", "host ms"] if timed
                                                     else ["step ms"])
        formats = [None, mib, mib] + ([mib, "{:.2f}x", ".1f", "{:.2f}x", ".1f"] if timed else [".1f"])
        widths = [16, 12, 10] + ([9, 8, 9, 8, 9] if timed else [9])
        title = (f"{regime}: d={cfg['d']}, batch {cfg['batch']} x {cfg['seq']}, "
                 f"checkpoint={cfg['checkpoint']!r}; per rank, MiB")
        print(table(rows, columns, formats, widths, indent="  ", title=title))
    if any("peak_bytes" in r for r in res["activations"].values()) and not res.get("peak_above_resident"):
        print("  (this run's peaks are max_memory_allocated as it stood, which can include memory an earlier "
              "measurement left allocated: later runs subtract it)")
    c = res.get("compiled", {})
    if "ddp" in c:
        rows = [(kind, r["step_s"] * 1e3, r["step_s"] / c["ddp"]["step_s"], r["host_s"] * 1e3) for kind, r in c.items()]
        print(table(rows, None, [None, ".1f", "{:.2f}x", ".1f"], [16, 8, 8, 9], indent="  ",
                    title="activations, every block compiled: step ms (vs DDP compiled), host ms"))


def plot_comm(res: dict, fit: dict, title: str):
    import matplotlib.pyplot as plt

    world = res["world"]
    sizes = res["sizes_bytes"]
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    ax.loglog(sizes, [t * 1e6 for t in res["all_reduce_s"]], "o", label="measured")
    ax.loglog(sizes, [m * 1e6 for m in fit["model_s"]], "-", label="alpha + size / beta")
    ax.set_xlabel("bytes per rank")
    ax.set_ylabel("microseconds")
    ax.set_title(f"{title} ({world} ranks)", fontsize=10)
    ax.legend()
    fig.tight_layout()
    return fig


def plot_ddp_timeline(rows: list, title: str):
    """Lanes of a profiled DDP step: backward work and the all-reduces (gradient buckets)."""
    import matplotlib.pyplot as plt

    lanes = sorted({r[0] for r in rows}, key=lambda n: (n == "all-reduce", n))
    colors = {"all-reduce": "tab:red", "backward": "tab:blue", "compute": "tab:blue",
              "forward/optimizer": "tab:green"}
    fig, ax = plt.subplots(figsize=(9, 1 + 0.5 * len(lanes)))
    for i, lane in enumerate(lanes):
        spans = [(r[2] / 1e3, max(r[3] / 1e3, 1e-3)) for r in rows if r[0] == lane]
        ax.broken_barh(spans, (i - 0.35, 0.7), color=colors.get(lane, "gray"))
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_xlabel("ms")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def overlap(rows: list) -> float:
    """Fraction of the all-reduce time that falls inside the span of the backward (or compute) work."""
    work = [(r[2], r[2] + r[3]) for r in rows if r[0] in ("backward", "compute")]
    comm = [(r[2], r[2] + r[3]) for r in rows if r[0] == "all-reduce"]
    if not work or not comm:
        return float("nan")
    lo, hi = min(w[0] for w in work), max(w[1] for w in work)
    total = sum(b - a for a, b in comm)
    inside = sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in comm)
    return inside / total if total else float("nan")
