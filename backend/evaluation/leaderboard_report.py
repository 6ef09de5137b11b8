"""The leaderboard of a suite over three or more models (``ranking.py``) as the report prints it: a table (rank,
model, suite score with its 95% interval, rank interval, tie-group letters), the groups in words, the rule in one
paragraph; its figure (each model's score with its interval, best on top, labelled with its ranks and groups); and
the few lines the CLI prints after the report."""

from __future__ import annotations

MIN_MODELS = 3  # two models: the pairwise comparison says it all

RULE_NOTE = (
    "Rule: every pair of models is compared by the pairwise rule (see Statistics below; paired by seed), each at "
    "confidence "
    "1 − 0.05/K for the K pairs (Bonferroni), so that all the separations below hold together with probability "
    "≥ 95%, exact with normal seed noise at any seed count. Two models are *separated* when that interval excludes "
    "0. A model's rank interval runs from 1 + the models separated above it to N − the models separated below it; "
    "a tie group is a largest set of models no two of which are separated, and two models share a letter exactly "
    "when the data cannot tell them apart. A suite score is the mean over tasks of the model's mean over seeds (the "
    "Average column), its interval a Student t over the units the rule uses (fine-tuning seeds of one checkpoint, or "
    "pretraining seeds when there are two or more), each unit's mean over tasks. A pair may read 'better' in its "
    "own comparison below (one comparison at 95%) and still share a group here (all K pairs at 95% together): the "
    "leaderboard asks more of the data."
)


CLIPPED = "†"


def _ci(ci, clipped: bool = False) -> str:
    return "–" if not ci else f"[{ci[0]:.2f}, {ci[1]:.2f}]" + CLIPPED * clipped


def _ranks(r: list[int]) -> str:
    return str(r[0]) if r[0] == r[1] else f"{r[0]}–{r[1]}"


def groups_text(lb: dict) -> str:
    """'a: A, B; b: C' (one group: 'one group: the data cannot tell these models apart')."""
    if len(lb["groups"]) == 1 and len(lb["models"]) > 1:
        return "one group (a): the data cannot tell any of these models apart"
    return "; ".join(f"**{g['letter']}**: {', '.join(g['models'])}" for g in lb["groups"])


def leaderboard_md(lb: dict) -> list[str]:
    n, k = len(lb["models"]), lb["pairs_count"]
    lines = ["", f"## Leaderboard: {n} models ranked, with the groups the data cannot tell apart", ""]
    lines += ["| Rank | Model | Suite score | 95% CI | Rank interval | Tie group |", "|---|---|---|---|---|---|"]
    for m in lb["models"]:
        lines.append(f"| {m['position']} | {m['label']} | {m['score']:.2f} | {_ci(m['ci95'], m.get('ci95_clipped'))} | "
                     f"{_ranks(m['rank_interval'])} | {''.join(m['groups'])} |")  # fmt: skip
    if any(m.get("ci95_clipped") for m in lb["models"]):
        lines += ["", f"{CLIPPED} clipped to [0, 100]: the seeds are too few to bound the score more tightly."]
    lines += ["", f"Tie groups: {groups_text(lb)}.", ""]
    split = [p for p in lb["pairs"] if p["separated"]]
    lines.append(
        f"Separated pairs ({len(split)} of {k}, each interval at {100 * lb['confidence_each']:.2f}%): "
        + ("; ".join(_separation(p) for p in split) or "none")
        + "."
    )
    for u in lb.get("unranked") or []:
        lines += ["", f"Not ranked: {u['label']} ({u['why']})."]
    lines += ["", f"Seed levels: {lb['levels']}.", "", RULE_NOTE]
    return lines


def _separation(p: dict) -> str:
    """'A > B by +2.10 [0.40, 3.80]', the better one first whatever the pair's order."""
    if p["estimate"] is not None and p["estimate"] < 0:
        return f"{p['b']} > {p['a']} by {-p['estimate']:+.2f} [{-p['ci'][1]:.2f}, {-p['ci'][0]:.2f}]"
    return f"{p['a']} > {p['b']} by {p['estimate']:+.2f} {_ci(p['ci'])}"


def leaderboard_rows(lb: dict) -> list[list]:
    """The table as rows (the Reports tab's table): rank, model, score, CI, rank interval, groups."""
    return [[m["position"], m["label"], f"{m['score']:.2f}", _ci(m["ci95"], m.get("ci95_clipped")),
             _ranks(m["rank_interval"]), "".join(m["groups"])] for m in lb["models"]]  # fmt: skip


ROW_HEADERS = ["Rank", "Model", "Suite score", "95% CI", "Rank interval", "Tie group"]


def leaderboard_figure(lb: dict):
    """Each model's suite score with its 95% interval, best on top, coloured by its first tie group; its rank
    interval and groups in its axis label (text beside the points would cross the intervals)."""
    import plotly.graph_objects as go

    from backend.reporting import figure_style  # noqa: F401  (the lab's template: plotly's default once imported)

    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
    letters = [g["letter"] for g in lb["groups"]]
    ms = lb["models"]
    fig = go.Figure()
    for m in ms:
        ci = m["ci95"]
        color = palette[letters.index(m["groups"][0]) % len(palette)] if m["groups"] else "#444"
        name = f"{m['label']} · ranks {_ranks(m['rank_interval'])} · group {''.join(m['groups'])}"
        bars = {"type": "data", "array": [ci[1] - m["score"]], "arrayminus": [m["score"] - ci[0]], "visible": True}
        fig.add_trace(
            go.Scatter(
                x=[m["score"]],
                y=[name],
                mode="markers",
                marker={"size": 12, "color": color},
                error_x=bars if ci else None,
                name=m["label"],
                hovertemplate=f"{m['label']}: %{{x:.2f}} {_ci(ci, m.get('ci95_clipped'))}<extra></extra>",
            )
        )
    fig.update_layout(
        title="Suite score (95% CI), rank interval and tie group",
        xaxis_title="suite score (mean over tasks, points)",
        yaxis={"autorange": "reversed"},
        height=160 + 50 * len(ms),
        width=760,
        showlegend=False,
    )
    return fig


def summary_lines(lb: dict) -> list[str]:
    """What the CLI prints after the report: one line per model and the groups."""
    out = [f"ranking ({len(lb['models'])} models; separations hold together at 95%, Bonferroni over "
           f"{lb['pairs_count']} pairs):"]  # fmt: skip
    width = max(len(m["label"]) for m in lb["models"])
    for m in lb["models"]:
        ci = _ci(m["ci95"], m.get("ci95_clipped"))
        out.append(f"  {m['position']}. {m['label']:<{width}}  {m['score']:6.2f} {ci:>17}  "
                   f"ranks {_ranks(m['rank_interval']):<5} group {''.join(m['groups'])}")  # fmt: skip
    out.append("tie groups: " + groups_text(lb).replace("**", ""))
    return out
