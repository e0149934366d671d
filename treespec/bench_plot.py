"""PNG plots of a ``treespec bench`` result (matplotlib, headless Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (backend must be chosen first)


def plot_all(result: dict, out: Path) -> list[Path]:
    """Write every plot the result has data for; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = [_mal_by_category(result, out / "mal_by_category.png")] if result.get("by_category") else []
    if result.get("tree_size_sweep"):
        written.append(_tree_sweep(result["tree_size_sweep"], out / "tokens_per_s_vs_tree_size.png"))
    if result.get("concurrency"):
        written += _concurrency(result["concurrency"], out)
    if result.get("timeline"):
        written.append(_timeline(result["timeline"], out / "tokens_per_s_over_time.png"))
    return written


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _mal_by_category(result: dict, path: Path) -> Path:
    cats = result["by_category"]
    names = list(cats)
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].bar(names, [cats[c]["mean_accepted_length"] for c in names], color="tab:blue")
    ax[0].set_ylabel("mean accepted length (tokens / step)")
    ax[1].bar(names, [cats[c]["speedup"] for c in names], color="tab:green")
    ax[1].axhline(1.0, color="gray", lw=1)
    ax[1].set_ylabel("speedup over plain decoding")
    for a in ax:
        a.tick_params(axis="x", rotation=30)
    return _save(fig, path)


def _tree_sweep(rows: list[dict], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r["tree_size"] for r in rows], [r["tokens_per_s"] for r in rows], "o-", label="tokens/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tree size (nodes)")
    ax.set_ylabel("tokens/s")
    ax2 = ax.twinx()
    ax2.plot([r["tree_size"] for r in rows], [r["mean_accepted_length"] for r in rows], "s--", color="tab:orange")
    ax2.set_ylabel("mean accepted length", color="tab:orange")
    return _save(fig, path)


def _concurrency(rows: list[dict], out: Path) -> list[Path]:
    fig, ax = plt.subplots(figsize=(6, 4))
    fig2, ax2 = plt.subplots(figsize=(6, 4))
    for mode, style in (("plain", "o-"), ("spec", "s-"), ("http-plain", "v-"), ("http", "^-")):
        rs = [r for r in rows if r["mode"] == mode]
        if not rs:
            continue
        xs = [r["concurrency"] for r in rs]
        ax.plot(xs, [r["tokens_per_s"] for r in rs], style, label=mode)
        ax2.plot(xs, [r["itl_p50_ms"] for r in rs], style, label=f"{mode} p50")
        ax2.plot(xs, [r["itl_p99_ms"] for r in rs], style.replace("-", ":"), label=f"{mode} p99")
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("aggregate tokens/s")
    ax2.set_xlabel("concurrent requests")
    ax2.set_ylabel("inter-token latency (ms)")
    for a in (ax, ax2):
        a.legend()
    return [_save(fig, out / "throughput_vs_concurrency.png"), _save(fig2, out / "itl_vs_concurrency.png")]


def _timeline(rows: list[dict], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode in sorted({r["mode"] for r in rows}):
        rs = [r for r in rows if r["mode"] == mode]
        ax.plot([r["tokens"] for r in rs], [r["tokens_per_s"] for r in rs], label=mode)
    ax.set_xlabel("generated tokens")
    ax.set_ylabel("tokens/s (window)")
    ax.legend()
    return _save(fig, path)
