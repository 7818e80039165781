"""What `kvgate sim sweep` shows: the ranked table, the best run as a `routing:` snippet,
`sweep.json` and `sweep.png`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from routing.config.profiles import PluginSpec, ProfileSpec, RoutingSection
from sim.plots import pyplot
from sim.replay.report import summary_row
from sim.replay.sweep.grid import policy_profile, with_weights
from sim.replay.sweep.rank import (
    GRID_METRICS,
    Constraint,
    Objective,
    Ranking,
    SweepRun,
    metric_value,
)

_COLUMNS = (  # title, width, format, summary field
    ("TTFT p50", 8, ".3f", "ttft_p50_s"),
    ("p90", 7, ".3f", "ttft_p90_s"),
    ("mean", 7, ".3f", "ttft_mean_s"),
    ("hit", 6, ".1%", "hit_rate"),
    ("goodput", 7, ".1%", "goodput"),
    ("max/mean", 8, ".2f", "max_mean_share"),
    ("sim s", 6, ".2f", "sim_seconds"),
)


def format_ranking(ranking: Ranking, objective: Objective) -> str:
    """All runs best first. `ok`: meets the constraints; `ceil`: an oracle run (a ceiling,
    never chosen); `-`: misses a constraint."""
    shown = {c[3] for c in _COLUMNS} | set(GRID_METRICS)
    extra = [] if objective.metric in shown else [objective.metric]
    widths = [max(6, len(m)) for m in extra]
    label = max([len(r.point.weights_label()) for r in ranking.runs] + [7])
    policy = max([len(r.point.policy) for r in ranking.runs] + [6])
    head = [
        f"{'rank':>4} {'ok':<4} {'policy':<{policy}} {'weights':<{label}} {'repl':>4} {'rate':>4}"
    ]
    head += [f"{m:>{w}}" for m, w in zip(extra, widths, strict=True)]
    head += [f"{title:>{width}}" for title, width, _, _ in _COLUMNS]
    header = " ".join(head)
    lines = [header, "-" * len(header)]
    for position, run in enumerate(ranking.runs, 1):
        s, p = run.summary, run.point
        ok = "ceil" if p.oracle else ("ok" if run.index in ranking.feasible else "-")
        cells = [
            f"{position:>4} {ok:<4} {p.policy:<{policy}} {p.weights_label():<{label}} "
            f"{p.replicas:>4} {p.rate_scale:>4g}"
        ]
        cells += [f"{metric_value(run, m):>{w}.4g}" for m, w in zip(extra, widths, strict=True)]
        cells += [f"{getattr(s, key):>{width}{spec}}" for _, width, spec, key in _COLUMNS]
        lines.append(" ".join(cells))
    return "\n".join(lines)


def best_routing_yaml(
    run: SweepRun,
    section: RoutingSection,
    objective: Objective,
    constraints: Sequence[Constraint],
) -> str:
    """The best run as a ready-to-paste `routing:` section, fleet size and load as comments.
    Weights other than the profile's own go into a new profile `<profile>-tuned`."""
    p, s = run.point, run.summary
    name, spec = policy_profile(section, p.policy)
    tuned = policy_profile(with_weights(section, p.policy, p.weights), p.policy)[1]
    routing: dict[str, Any] = {"policy": name}
    if tuned != spec:
        name = routing["policy"] = f"{name}-tuned"
        routing["profiles"] = {name: _profile_dict(tuned)}
    subject = f" subject to {', '.join(map(str, constraints))}" if constraints else ""
    comments = [
        f"# kvgate sim sweep: best for {objective}{subject}",
        f"# {p.policy}, weights {p.weights_label() if p.weights else 'as profiled'}: "
        f"TTFT p90 {s.ttft_p90_s:.3f} s, "
        f"mean {s.ttft_mean_s:.3f} s, hit rate {s.hit_rate:.1%}, goodput {s.goodput:.1%}",
        f"# fleet: {p.replicas} replicas, at {p.rate_scale:g}x the trace's request rate",
    ]
    body = yaml.safe_dump({"routing": routing}, sort_keys=False, default_flow_style=False)
    return "\n".join(comments) + "\n" + body


def _profile_dict(spec: ProfileSpec) -> dict[str, Any]:
    """A profile as YAML data: defaults left out, except every scorer's weight (the point of
    the snippet), and instance names that merely repeat the plugin type dropped."""

    def plain(plugin: PluginSpec, *, weight: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"type": plugin.type}
        if plugin.instance_name != plugin.type:
            out["name"] = plugin.instance_name
        if weight:
            out["weight"] = plugin.weight
        if plugin.params:
            out["params"] = plugin.params
        return out

    profile: dict[str, Any] = {}
    if spec.filters:
        profile["filters"] = [plain(f) for f in spec.filters]
    if spec.scorers:
        profile["scorers"] = [plain(s, weight=True) for s in spec.scorers]
    profile["picker"] = plain(spec.picker)
    return profile


def run_record(run: SweepRun, position: int, ranking: Ranking) -> dict[str, Any]:
    """One run for `sweep.json`: its grid parameters, rank, and `summary.json`'s fields."""
    p = run.point
    summary = summary_row(run.summary)
    return {
        "rank": position,
        "run": run.index,
        "policy": p.policy,
        "weights": dict(p.weights),
        "replicas": p.replicas,
        "rate_scale": p.rate_scale,
        "feasible": run.index in ranking.feasible,
        "oracle": p.oracle,
        **summary,
    }


def write_sweep_json(header: dict[str, Any], ranking: Ranking, snippet: str, out: Path) -> Path:
    """`sweep.json`: the sweep's parameters, every run best first, and `best` (or null)."""
    out.mkdir(parents=True, exist_ok=True)
    runs = [run_record(r, i, ranking) for i, r in enumerate(ranking.runs, 1)]
    best = None
    if ranking.best is not None:
        best = next(r for r in runs if r["run"] == ranking.best.index) | {"routing_yaml": snippet}
    path = out / "sweep.json"
    path.write_bytes(
        orjson.dumps({**header, "runs": runs, "best": best}, option=orjson.OPT_INDENT_2)
    )
    return path


def write_sweep_plot(ranking: Ranking, metric: str, out: Path) -> Path:
    """`sweep.png`: a metric against the replica count, one panel per rate scale and one line
    per policy and weights (dashed: oracle); the best run is starred."""
    plt = pyplot()

    runs = sorted(ranking.runs, key=lambda r: r.index)
    scales = sorted({r.point.rate_scale for r in runs})
    fig, axes = plt.subplots(1, len(scales), figsize=(5.5 * len(scales) + 2.5, 4.2), squeeze=False)
    for ax, scale in zip(axes[0], scales, strict=True):
        lines: dict[str, list[SweepRun]] = {}
        for r in runs:
            if r.point.rate_scale == scale:
                lines.setdefault(f"{r.point.policy} {r.point.weights_label()}", []).append(r)
        for label, members in lines.items():
            xs = [r.point.replicas for r in members]
            ys = [metric_value(r, metric) for r in members]
            style = "o--" if members[0].point.oracle else "o-"
            ax.plot(xs, ys, style, lw=1, ms=4, label=label)
        best = ranking.best
        if best is not None and best.point.rate_scale == scale:
            value = metric_value(best, metric)
            ax.plot([best.point.replicas], [value], "*", color="k", ms=16, label="best")
        ax.set_title(f"rate scale {scale:g}")
        ax.set_xlabel("replicas")
        ax.set_xticks(sorted({r.point.replicas for r in runs}))
        ax.set_ylabel(metric)
        ax.grid(True, alpha=0.3)
    axes[0][-1].legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(f"kvgate sim sweep: {metric} (best: star)")
    fig.tight_layout()
    path = out / "sweep.png"
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
