"""The suite's ``render``: the results page and the experiments pages' variant tables, from the run summaries alone.

``render`` draws the results page from the summaries ``collect`` writes, into the region of --out between MARKERS
(printed to stdout where --out has none).  A summary is a package-default row or a variant (benchmarks/page_rows.py says which,
how a row is named ``agent [core]`` and which of its flags its command shows: those that differ from today's
defaults).  The region: first the summary (benchmarks/summary_table.py: per row our score beside the best published
point at or below our agent steps; MinAtar's agents by their IQM over games and seeds with a stratified-bootstrap
interval, rliable's), then per package that has summaries a table of its package-default rows, one per env, agent and
core (a run that ended short of its --total_steps "1.23M of 5M, stopped"; a transcribed run's seed marked, with a line
under the table saying so; the last column links the variants), the rows' commands and per env a PNG whose x-axis
ends at the rows' most agent steps, with the anchors' published points up to there (benchmarks/anchors.json), a
transcribed run's points as markers joined by a line.  The variants go into the experiments page each row links
(--experiments, default the experiments/ next to --out), between VARIANT_MARKERS (a "Variant runs" section appended
where a page has none): a table with what each changed, and their commands as recorded.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import sys

from benchmarks import page_rows, summary_table
from benchmarks.results.groups import collapsed, save_figure
from benchmarks.results.load import (
    PROG,
    REPO,
    TRANSCRIBED_MARK,
    Run,
    anchors_of,
    load_anchors,
    load_summaries,
    path_name,
    run_of_summary,
    writable_dir_of,
)
from benchmarks.results.render_figure import plot_env
from benchmarks.results.render_rows import (
    EXPERIMENTS,
    RENDER_HEADER,
    command_block,
    experiments_page,
    linked_row,
    page_ref,
    page_refs,
    render_row,
)
from benchmarks.summary_table import markdown_table, prose

MARKERS = ("<!-- suite:begin -->", "<!-- suite:end -->")
VARIANT_MARKERS = ("<!-- suite:variants:begin -->", "<!-- suite:variants:end -->")
VARIANT_HEADING = "## Variant runs"
VARIANT_ANCHOR = "#variant-runs"


PACKAGE_TITLES = {
    "torchbeast_atari": "Atari",
    "torchbeast_gym": "gym",
    "torchbeast_mujoco": "MuJoCo",
    "torchbeast_football": "Football",
    "torchbeast_procgen": "Procgen",
    "torchbeast_dmlab": "DeepMind Lab",
    "torchbeast_memory": "Memory tasks: POPGym, MiniGrid",
    "torchbeast_minatar": "MinAtar",
}
SHORT_TITLES = {package: title.split(":")[0] for package, title in PACKAGE_TITLES.items()}  # the summary's column


@dataclasses.dataclass
class PageRuns:
    """The summaries as the page shows them: the package-default rows' runs by (package, env, row name), each named
    ``agent [core]`` (benchmarks/page_rows.py), and the variants' runs by (package, env, agent [label]), each with
    what it changed and the (package, env, agent, core) of the row it varies."""

    defaults: dict[tuple[str, str, str], list[Run]]
    variants: dict[tuple[str, str, str], list[Run]]
    reasons: dict[str, str]  # a variant's summary path -> what it changed
    varies: dict[str, tuple[str, str, str, str]]  # a variant's summary path -> (package, env, agent, core)


def page_runs(summaries: list[tuple[str, dict]]) -> PageRuns:
    """The summaries split into package-default rows and variants (benchmarks/page_rows.py), each side grouped, its
    runs by seed."""
    reasons = {path: page_rows.variant_reason(summary) for path, summary in summaries}
    defaults = [(path, summary) for path, summary in summaries if reasons[path] is None]
    names = page_rows.row_names(defaults)
    page_rows.check_one_per_seed(defaults, names)
    out = PageRuns({}, {}, {p: r for p, r in reasons.items() if r is not None}, {})
    for path, summary in summaries:
        run = run_of_summary(path, summary)
        if reasons[path] is None:
            run.row_name = names[path]
            out.defaults.setdefault((summary["package"], run.env, run.name), []).append(run)
        else:
            out.variants.setdefault((summary["package"], run.env, run.name), []).append(run)
            out.varies[path] = (summary["package"], run.env, run.agent, page_rows.core_of(summary))
    for groups in (out.defaults, out.variants):
        for group in groups.values():
            group.sort(key=lambda r: r.seed)
    packages = list(dict.fromkeys(summary["package"] for _, summary in summaries))
    info = dict(summaries)
    out.defaults = dict(sorted(out.defaults.items(), key=lambda item: row_order(item[1], packages, info)))
    return out


def row_order(group: list[Run], packages: list[str], info: dict[str, dict]) -> tuple:
    """A package-default row's place: by package (as the summaries come), env, agent, then core (CORE_ORDER)."""
    run = group[0]
    core = page_rows.core_of(info[run.run_dir])
    rank = page_rows.CORE_ORDER.index(core) if core in page_rows.CORE_ORDER else len(page_rows.CORE_ORDER)
    return packages.index(info[run.run_dir]["package"]), run.env, run.agent, rank


def variant_pages(group: list[Run], page: PageRuns, info: dict[str, dict], experiments: str) -> dict[str, int]:
    """The experiments pages that hold variants of a row's (env, agent, core), with how many runs each."""
    run = group[0]
    key = (info[run.run_dir]["package"], run.env, run.agent, page_rows.core_of(info[run.run_dir]))
    pages: dict[str, int] = {}
    for path, varies in page.varies.items():
        if varies == key:
            where = experiments_page(key[0], run.agent, info[path], experiments)
            pages[where] = pages.get(where, 0) + 1
    return pages


def package_table(package: str, page: PageRuns, info: dict, anchors: dict, experiments: str, refs: set) -> list[str]:
    """A package's table of package-default rows, the pages it links added to ``refs`` (``page_refs``)."""
    rows = []
    for (p, _, _), group in page.defaults.items():
        if p != package:
            continue
        run = group[0]
        refs.add((experiments_page(package, run.agent, info[run.run_dir], experiments), ""))
        pages = variant_pages(group, page, info, experiments)
        refs.update((path, VARIANT_ANCHOR) for path in pages)
        variants = ", ".join(f"[{n}][{page_ref(path, VARIANT_ANCHOR)}]" for path, n in pages.items()) or "-"
        rows.append(linked_row(group, info, anchors, experiments, variants))
    return [markdown_table(RENDER_HEADER + ["variant runs"], rows), ""] if rows else []


def variants_alone(package: str, page: PageRuns, info: dict, experiments: str, refs: set) -> list[str]:
    """A line naming the package's envs that have variants and no package-default row, each with its pages."""
    shown = {env for (p, env, _) in page.defaults if p == package}
    pages: dict[str, set[str]] = {}
    for (p, env, _), group in page.variants.items():
        if p == package and env not in shown:
            for run in group:
                pages.setdefault(env, set()).add(experiments_page(p, run.agent, info[run.run_dir], experiments))
    if not pages:
        return []
    refs.update((path, VARIANT_ANCHOR) for paths in pages.values() for path in paths)
    envs = [
        f"{env} ({', '.join(f'[{page_ref(p)}][{page_ref(p, VARIANT_ANCHOR)}]' for p in sorted(paths))})"
        for env, paths in sorted(pages.items())
    ]
    return [prose("No run at the package's defaults yet, variants alone: " + "; ".join(envs) + "."), ""]


def anchors_line(runs: list[Run], anchors: dict) -> str:
    """The sources of the anchors drawn beside the runs, each once with the agents of all its anchors."""
    used = {
        (a["source"], tuple(a["agents"]))
        for env in {r.env for r in runs}
        for a in anchors_of(anchors, env, {r.agent for r in runs})
    }
    agents_of_source: dict[str, dict[str, None]] = {}
    for source, agents in sorted(used):
        agents_of_source.setdefault(source, {}).update(dict.fromkeys(agents))
    sources = [
        f"[{anchors['sources'][s]['name']}]({anchors['sources'][s]['url']}) for {', '.join(agents)}"
        for s, agents in agents_of_source.items()
    ]
    return prose("Anchors: " + ("; ".join(sources) if sources else "none for these envs") + ".")


def render_package(
    package: str, page: PageRuns, info: dict, anchors: dict, out_dir: str, img: str, experiments: str, refs: set
) -> str:
    """A package's section of the page: its table of package-default rows (a line on the transcribed runs where it
    has some, one on the envs with variants alone), the rows' commands, a PNG per env (written into ``img``) and
    the anchors' sources; the pages its links name added to ``refs``."""
    groups = {(env, name): g for (p, env, name), g in page.defaults.items() if p == package}
    runs = [run for group in groups.values() for run in group]
    title = f"{PACKAGE_TITLES[package]} (`{package}`)" if package in PACKAGE_TITLES else f"`{package}`"
    lines = [f"### {title}", "", *package_table(package, page, info, anchors, experiments, refs)]
    if any(run.transcribed for run in runs):
        lines += [
            prose(
                f"{TRANSCRIBED_MARK} Transcribed from the run's record in docs/experiments/ (the summary's "
                f"`source` names the section; its run directory was not kept): its curve holds the recorded "
                f'points alone, and "-" is a figure not recorded.'
            ),
            "",
        ]
    lines += variants_alone(package, page, info, experiments, refs)
    if not groups:
        return "\n".join(lines).rstrip()
    lines += [
        prose(
            "Commands (the flags that differ from the package's defaults of today; each flag not given ran at the "
            "default of the commit named):"
        ),
        "",
        *command_block(list(groups.values()), info),
        "",
    ]
    for env in dict.fromkeys(env for env, _ in groups):
        png = os.path.join(img, f"suite_{package}_{path_name(env)}.png")
        save_figure(plot_env(env, [g for (e, _), g in groups.items() if e == env], info, anchors), png)
        lines += [f"![{env}, {package}]({os.path.relpath(png, out_dir)})", ""]
    return "\n".join(lines + [anchors_line(runs, anchors)])


def render_markdown(
    summaries: list[tuple[str, dict]], anchors: dict, out_dir: str, img: str, data: str, experiments: str = EXPERIMENTS
) -> tuple[str, dict[str, str]]:
    """The page's generated region (the summary, then a section per package that has summaries, PNGs written into
    ``img``, the reference links' definitions last) and each experiments page's variants region, by page."""
    info = {path: summary for path, summary in summaries}
    page = page_runs(summaries)
    packages = dict.fromkeys(summary["package"] for _, summary in summaries)
    shown = os.path.relpath(data, REPO) if os.path.abspath(data).startswith(REPO + os.sep) else data
    note = prose(
        f"Generated by `{PROG} render` from the run summaries in {shown} (`{PROG} collect RUN_DIR ...`): one row "
        f"per env, agent and core at the package's defaults; its variant runs (other flags, earlier defaults, "
        f"probes) are in the page the column links.  Mean ± std over seeds, per seed in the seeds' order; steps to "
        f"anchor score: the agent step of the first logs.csv row whose last-100 return reached the score of "
        f"benchmarks/anchors.json (and, where every seed has greedy validations, the first validation at it); wall "
        f"time: logs.csv's time, summed over a resumed run's starts."
    )
    refs: set[tuple[str, str]] = set()
    sections = [render_package(p, page, info, anchors, out_dir, img, experiments, refs) for p in packages]
    region = [
        *summary_table.render_summary(list(page.defaults.values()), info, anchors, SHORT_TITLES),
        "",
        "## Results per package",
        "",
        note,
        *("\n" + section for section in sections),
        "",
        *page_refs(refs, out_dir),
    ]
    return "\n".join(region), variant_regions(page, info, anchors, experiments)


def variant_regions(page: PageRuns, info: dict[str, dict], anchors: dict, experiments: str) -> dict[str, str]:
    """Each experiments page's variants region: a table of the variants it holds (what each changed in the last
    column) and their commands as recorded; every page that has the markers gets one, "none" where it holds none."""
    by_page: dict[str, list[list[Run]]] = {
        path: [] for path in glob.glob(os.path.join(experiments, "*.md")) if VARIANT_MARKERS[0] in read_text(path)
    }
    for (package, _, _), group in page.variants.items():
        run = group[0]
        by_page.setdefault(experiments_page(package, run.agent, info[run.run_dir], experiments), []).append(group)
    out = {}
    for path, groups in sorted(by_page.items()):
        if not groups:
            out[path] = (
                "None: every run of this page's packages and agents with a summary is a row of the results page."
            )
            continue
        rows = [
            render_row(g, info, anchors, g[0].name) + [collapsed([page.reasons[r.run_dir] for r in g])] for g in groups
        ]
        out[path] = "\n".join(
            [
                prose(
                    f"Generated by `{PROG} render` from the run summaries in docs/data marked as variants: what each "
                    "run changed from its package's defaults is its last column, and the rows at the defaults are "
                    "in [results.md](../results.md).  Commands as recorded, the run's identity left out (a path of "
                    "the machine it ran on as SAVEDIR/...): each flag not given ran at the default of the commit named."
                ),
                "",
                markdown_table(RENDER_HEADER + ["what differs"], rows),
                "",
                *command_block(groups, info, page_rows.variant_command),
            ]
        )
    return out


def read_text(path: str) -> str:
    """A text file's contents."""
    with open(path) as f:
        return f.read()


def replace_region(text: str, region: str, markers: tuple[str, str] = MARKERS) -> str | None:
    """``text`` with what lies between ``markers`` replaced by ``region``; None where the markers are not both
    there."""
    begin, end = text.find(markers[0]), text.find(markers[1])
    if begin < 0 or end < begin:
        return None
    return text[: begin + len(markers[0])] + "\n" + region + "\n" + text[end:]


def write_variant_regions(regions: dict[str, str]) -> None:
    """Each page's variants region between VARIANT_MARKERS; a page without them gets a VARIANT_HEADING section with
    them at its end (a page that does not exist, its title too)."""
    for path, region in regions.items():
        text = read_text(path) if os.path.exists(path) else f"# {os.path.basename(path)[:-3]}\n"
        page = replace_region(text, region, VARIANT_MARKERS)
        if page is None:
            page = f"{text.rstrip()}\n\n{VARIANT_HEADING}\n\n{VARIANT_MARKERS[0]}\n{region}\n{VARIANT_MARKERS[1]}\n"
        with open(path, "w") as f:
            f.write(page)


def render(args) -> int:
    summaries = load_summaries(args.data)
    writable_dir_of(args.out, "--out")
    os.makedirs(args.img, exist_ok=True)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    experiments = args.experiments or os.path.join(out_dir, "experiments")
    region, variants = render_markdown(summaries, load_anchors(), out_dir, args.img, args.data, experiments)
    page = None
    if os.path.exists(args.out):
        page = replace_region(read_text(args.out), region)
    if page is None:
        print(region)
        print(
            f"{args.out} has no {MARKERS[0]} ... {MARKERS[1]} region: the markdown is printed above instead",
            file=sys.stderr,
        )
        return 0
    with open(args.out, "w") as f:
        f.write(page)
    write_variant_regions(variants)
    print(
        f"wrote {len(summaries)} runs' summaries into {args.out} (between its markers), their curves into {args.img} "
        f"and the variants' tables into {', '.join(os.path.relpath(p, out_dir) for p in variants) or 'no page'}"
    )
    return 0
