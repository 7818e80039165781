"""The admission bench's figures, tables, JSON and PNG.

Fair share (max-min, by water-filling): the admitted requests are split among the tenants so
that no tenant gets more than it asked for and the rest is split equally; a tenant's
`share_vs_fair` is what it got over that (1.0: exactly its fair share).
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.admission.load import Shot
from routing.percentile import percentile
from sim.plots import PlotsUnavailable, pyplot

TARGET_TTFT_RATIO = 2.0


def ttft_figures(shots: Sequence[Shot]) -> dict[str, float]:
    ttfts = [s.ttft_s for s in shots if s.ttft_s is not None]
    mean = sum(ttfts) / len(ttfts) if ttfts else math.nan
    return {
        "count": len(ttfts),
        "ttft_mean_s": mean,
        "ttft_p50_s": percentile(ttfts, 50),
        "ttft_p90_s": percentile(ttfts, 90),
        "ttft_p99_s": percentile(ttfts, 99),
    }


def fair_shares(demand: Mapping[str, int], total: int) -> dict[str, float]:
    """Max-min fair split of `total` among tenants asking `demand` (water-filling)."""
    shares = dict.fromkeys(demand, 0.0)
    left, open_ = float(total), {t for t, d in demand.items() if d > 0}
    while open_ and left > 1e-9:
        each = left / len(open_)
        capped = {t for t in open_ if demand[t] - shares[t] <= each}
        if not capped:
            for t in open_:
                shares[t] += each
            break
        for t in capped:
            left -= demand[t] - shares[t]
            shares[t] = float(demand[t])
        open_ -= capped
    return shares


def tenant_shares(shots: Sequence[Shot]) -> dict[str, dict[str, Any]]:
    """Per tenant: sent, admitted, statuses, its share of the admitted and its fair share."""
    admitted = [s for s in shots if s.status == 200]
    sent = Counter(s.tenant for s in shots)
    got = Counter(s.tenant for s in admitted)
    fair = fair_shares(sent, len(admitted))
    return {
        t: {
            "sent": sent[t],
            "admitted": got[t],
            "statuses": dict(Counter(str(s.status) for s in shots if s.tenant == t)),
            "share": got[t] / len(admitted) if admitted else math.nan,
            "fair_share": fair[t] / len(admitted) if admitted else math.nan,
            "share_vs_fair": got[t] / fair[t] if fair[t] else math.nan,
        }
        for t in sorted(sent)
    }


def burst_figures(
    shots: Sequence[Shot], unloaded: Mapping[str, float], duration_s: float, settle_s: float
) -> dict[str, Any]:
    """The burst's figures; shares both over the whole burst and over the arrivals after
    `settle_s` (the first places go to whoever comes first, before anyone contends)."""
    status = Counter(s.status for s in shots)
    admitted = [s for s in shots if s.status == 200]
    ttft = ttft_figures(admitted)
    retry = [s.retry_after_s for s in shots if s.status == 429 and s.retry_after_s is not None]
    return {
        "sent": len(shots),
        "offered_rps": len(shots) / duration_s,
        "statuses": {str(k): v for k, v in sorted(status.items())},
        "shed_fraction": status[429] / len(shots) if shots else math.nan,
        "admitted": len(admitted),
        **ttft,
        "ttft_mean_ratio": ttft["ttft_mean_s"] / unloaded["ttft_mean_s"],
        "ttft_p90_ratio": ttft["ttft_p90_s"] / unloaded["ttft_p90_s"],
        "retry_after_p50_s": percentile(retry, 50),
        "retry_after_max_s": max(retry, default=math.nan),
        "tenants": tenant_shares(shots),
        "settle_s": settle_s,
        "tenants_settled": tenant_shares([s for s in shots if s.sent_s >= settle_s]),
    }


def verdicts(burst: Mapping[str, Any]) -> dict[str, bool]:
    worst = min(t["share_vs_fair"] for t in burst["tenants_settled"].values())
    return {
        "ttft_mean_within_2x": burst["ttft_mean_ratio"] <= TARGET_TTFT_RATIO,
        "ttft_p90_within_2x": burst["ttft_p90_ratio"] <= TARGET_TTFT_RATIO,
        "shed_with_429": burst["statuses"].get("429", 0) > 0,
        # 5 % slack: the shares are counted over a few hundred requests
        "no_tenant_below_fair_share_once_contended": worst >= 0.95,
    }


def table(report: Mapping[str, Any]) -> str:
    u, c, b = report["unloaded"], report["capacity"], report["burst"]
    lines = [
        "| phase | requests | TTFT mean | p50 | p90 | notes |",
        "|---|---|---|---|---|---|",
        f"| unloaded | {u['count']} | {_ms(u['ttft_mean_s'])} | {_ms(u['ttft_p50_s'])} "
        f"| {_ms(u['ttft_p90_s'])} | one at a time |",
        f"| at capacity | {c['count']} | {_ms(c['ttft_mean_s'])} | {_ms(c['ttft_p50_s'])} "
        f"| {_ms(c['ttft_p90_s'])} | {c['clients']} clients, {c['throughput_rps']:.1f} req/s |",
        f"| burst, admitted | {b['admitted']} | {_ms(b['ttft_mean_s'])} | {_ms(b['ttft_p50_s'])} "
        f"| {_ms(b['ttft_p90_s'])} | {b['offered_rps']:.0f} req/s offered, "
        f"{b['shed_fraction']:.0%} shed (429) |",
        "",
        f"admitted TTFT over unloaded: mean {b['ttft_mean_ratio']:.2f}x, "
        f"p90 {b['ttft_p90_ratio']:.2f}x (target <= {TARGET_TTFT_RATIO:g}x); statuses "
        f"{b['statuses']}; Retry-After p50 {b['retry_after_p50_s']} s",
    ]
    lines += _share_table("whole burst", b["tenants"])
    lines += _share_table(f"arrivals after {b['settle_s']:.1f} s", b["tenants_settled"])
    lines.append("")
    lines += [f"{'PASS' if ok else 'FAIL'}  {name}" for name, ok in report["verdicts"].items()]
    return "\n".join(lines)


def _share_table(title: str, tenants: Mapping[str, Mapping[str, Any]]) -> list[str]:
    lines = [
        "",
        f"| tenant ({title}) | sent | admitted | share | fair share | share / fair |",
        "|---|---|---|---|---|---|",
    ]
    for name, t in tenants.items():
        lines.append(
            f"| {name} | {t['sent']} | {t['admitted']} | {t['share']:.1%} "
            f"| {t['fair_share']:.1%} | {t['share_vs_fair']:.2f} |"
        )
    return lines


def _ms(seconds: float) -> str:
    return "–" if math.isnan(seconds) else f"{seconds * 1e3:.0f} ms"


def write_outputs(
    report: Mapping[str, Any], ttfts: Mapping[str, Sequence[float]], out: Path
) -> None:
    """`admission.json`, `admission.png`, and the tables to stdout."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "admission.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(table(report))
    try:
        _plot(report, ttfts, out / "admission.png")
    except PlotsUnavailable as exc:
        print(exc, file=sys.stderr)
    print(f"\nwrote {out / 'admission.json'} and {out / 'admission.png'}", file=sys.stderr)


def _plot(report: Mapping[str, Any], ttfts: Mapping[str, Sequence[float]], path: Path) -> None:
    plt = pyplot()
    fig, (cdf, bars) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, values in ttfts.items():
        ordered = sorted(values)
        ys = [(i + 1) / len(ordered) for i in range(len(ordered))]
        cdf.plot([v * 1e3 for v in ordered], ys, label=name)
    unloaded = report["unloaded"]["ttft_mean_s"] * 1e3
    cdf.axvline(2 * unloaded, color="grey", linestyle="--", label="2x unloaded mean")
    cdf.set_xlabel("client TTFT (ms)")
    cdf.set_ylabel("fraction of requests")
    cdf.set_title("TTFT: unloaded, at capacity, admitted during the burst")
    cdf.legend(fontsize=8)
    tenants = report["burst"]["tenants"]
    names = list(tenants)
    xs = range(len(names))
    for offset, key, label in ((-0.27, "sent", "sent"), (0.0, "admitted", "admitted")):
        bars.bar([x + offset for x in xs], [tenants[n][key] for n in names], 0.27, label=label)
    admitted = report["burst"]["admitted"]
    fair = [tenants[n]["fair_share"] * admitted for n in names]
    bars.bar([x + 0.27 for x in xs], fair, 0.27, label="fair share")
    bars.set_xticks(list(xs), names)
    bars.set_ylabel("requests")
    bars.set_title(f"burst: {report['burst']['shed_fraction']:.0%} shed with 429")
    bars.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
