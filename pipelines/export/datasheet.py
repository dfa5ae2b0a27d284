"""The datasheet written into every export as ``README.md`` (no Django: rendered from facts).

Gebru et al., "Datasheets for Datasets" (CACM 2021) list what a reader of a published dataset
needs: motivation, composition, collection, preprocessing, labelling, uses, distribution. An
OOD test set is judged by how it was made, so each of those sections is filled here from the
facts the toolkit recorded while making it (``facts``: a JSON-able dict gathered by
curation.services.export_datasheet; the manifest stores the same dict under ``datasheet``), never
from free text. The header is a Hugging Face dataset card's YAML block, so the README doubles
as the card when the folder is uploaded.
"""
from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from typing import Any

from pipelines.export.layouts import LAYOUTS

# Hugging Face dataset cards' size buckets
_SIZES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M"))


def size_category(n: int) -> str:
    return next((label for limit, label in _SIZES if n < limit), "n>10M")


def _q(text: Any) -> str:
    """A YAML scalar: JSON strings are valid YAML."""
    return json.dumps(str(text), ensure_ascii=False)


def _cell(text: Any) -> str:
    """A Markdown table cell: pipes and line breaks would break the table."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _pct(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{100 * x:.{digits}f}%"


def _num(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def render(facts: dict) -> str:
    """The README's text."""
    e = facts["export"]
    n, n_classes = e["images"], e["classes"]
    yaml = [
        "---",
        "pretty_name: " + _q(f"{e['name']} v{e['version']}"),
        "license: unknown",
        "task_categories:",
        "- image-classification",
        "tags:",
        "- out-of-distribution-detection",
        "- imagenet",
        "size_categories:",
        f"- {size_category(n)}",
        "---",
    ]
    md: list[str] = [
        f"# {e['name']} v{e['version']}",
        "",
        f"An out-of-distribution (OOD) test set of **{n} images in {n_classes} classes** for classifiers trained on "
        f"**{e['id_classes']}** (split `{e['split']}`), made with oodc {e['code_version']} on {e['created']}"
        + (f" by {e['creator']}" if e.get("creator") else "") + ". Every number below is taken from the curation "
        "database that wrote the export; `manifest.json` holds the same facts (key `datasheet`) and the sha256 of every file.",
        "",
        "## Motivation",
        "",
        f"To measure how well an ImageNet classifier's OOD detector tells apart images of its {e['id_classes']} classes from "
        "images that show none of them. Each image was checked by people to show an object of its OOD class and no object of "
        "any ID class (the review protocol below), so a detector is not penalised for images that are in fact ID.",
        "",
        "## Composition",
        "",
    ]
    md += _table(["class", "wnid", "images", "sources"],
                 [[c["name"], c["wnid"], c["images"], ", ".join(c["sources"])] for c in facts["classes"]])
    md += ["", "## Collection: sources", ""]
    md += _table(["source", "images ingested", "readable", "reviewed to a final label", "final ood", "final id", "final unclear",
                  "final not_target", "exported"],
                 [[s["name"], s["images"], s["ok"], s["final"], s["final_by_label"].get("ood", 0), s["final_by_label"].get("id", 0),
                   s["final_by_label"].get("unclear", 0), s["final_by_label"].get("not_target", 0), s["exported"]]
                  for s in facts["sources"]])
    # how each source was read (docs/sources.md), and the published list an audited one was made from
    forms = [s for s in facts["sources"] if s.get("layout", "folder") != "folder" or s.get("list")]
    if forms:
        md += [""]
        for s in forms:
            lst = s.get("list")
            md += [f"- **{s['name']}** was read as `{s.get('layout', 'folder')}`"
                   + (f", only the {lst['entries']} entries of the published list `{lst['path'].rsplit('/', 1)[-1]}` ({lst['format']}, sha256 "
                      f"`{lst['sha256']}`)" if lst else "") + "; its images are named `<archive>/<member>` where they lie in an archive."]
    md += ["", "## Class filter", ""]
    for cf in facts["class_filter"]:
        if cf.get("run") is None:
            md += [f"- **{cf['source']}**: no class filter run; every class counted as kept."]
            continue
        md += [f"- **{cf['source']}**: run {cf['run']}, policy `{cf['policy']}` (digest `{cf['policy_digest']}`), ID classes "
               f"`{cf['id_spec']}`; {cf['classes']} candidate classes: " + ", ".join(f"{v} {k}" for k, v in cf["by_decision"].items()) + "."]
        if cf["by_rule"]:
            md += ["", *_table(["decision", "rule", "classes"], [[r["decision"], r["rule"] or "(no rule fired)", r["classes"]] for r in cf["by_rule"]]), ""]
        md += [f"  Curator overrides: {cf['overrides']} pinned (allow/deny), {cf['resolutions']} flags resolved by a curator."]
    md += ["", "## Image pipeline", ""]
    ip = facts["image_pipeline"]
    weights = "; ".join(f"`{w['weights']}`" + (f" (sha256 `{w['sha256']}`)" if w["sha256"] else "") for w in ip["weights"])
    md += [
        f"- Model: `{ip['model']}` (timm `{ip['timm_name']}`); weights: "
        + (weights or "no feature extraction of these sources is recorded") + ".",
        f"- Near-duplicates: cosine similarity of the model's features at or above {ip['id_dup_threshold']} that also pass the pixel "
        f"check (mean absolute pixel difference at most {ip['max_pixel_diff']}).",
        f"- Removed in the pool as near-duplicates of another candidate: {ip['near_duplicates_in_pool']}; as copies of an ID "
        f"image: {ip['duplicates_of_id']}.",
        f"- Leakage check before writing: {ip['leakage_checked']} images against {ip['leakage_id_reference']} ID reference images and "
        f"{ip['leakage_other_split']} images of other splits; {ip['leakage_violations']} violations"
        + (f" (overridden: {ip['leakage_override']})" if ip.get("leakage_override") else "") + ".",
    ]
    rv = facts["review"]
    md += ["", "## Labelling: review protocol", ""]
    md += ["- Reviews per image: " + "; ".join(f"{s}: {r}" for s, r in rv["reviews_required"].items()) + "."]
    md += [f"- Annotators: {rv['annotators']}, {rv['reviews']} reviews (gold checks not counted)."]
    md += [f"- Agreement: Fleiss' kappa {_num(rv['fleiss_kappa'])} over {rv['multi_reviewed']} images with two or more reviews."]
    md += [f"- Gold accuracy: {rv['gold_correct']} of {rv['gold']} gold checks answered correctly ({_pct(rv['gold_accuracy'])})."]
    md += [f"- Adjudicated by a curator: {rv['adjudicated']} images; still in conflict: {rv['conflict']}."]
    md += [f"- Final label: {rv['final_label_rule']}; only images whose final label is `ood` are exported."]
    md += ["", "## Contamination", ""]
    for c in facts["contamination"]:
        md += [f"- **{c['source']}**: {c['n_id']} of {c['n']} sampled reviewed images were finally labelled `id` "
               f"({_pct(c['share'])}, Wilson interval {_pct(c['ci_low'])} to {_pct(c['ci_high'])} at z = 1.96; sample seed {c['seed']}). "
               "This is the source's rate before cleaning (NINCO Table 1), not the export's."]
    if facts.get("certificate"):
        md += ["", facts["certificate"], "",
               "What a certificate guarantees: the chance that its bound was ever below the true number of ID images, at any "
               "look (after any review, at the certification or after it), is at most one minus its confidence."]
    dif = facts.get("difficulty")
    if dif:
        md += ["", "## Easy / hard sub-splits", "",
               f"{dif['rule']}. Measure: {dif['measure']}, against the ID classes `{dif['id_classes']}`.", ""]
        md += _table(["sub-split", "classes", "images"], [[k, v["classes"], v["images"]] for k, v in dif["counts"].items()])
    md += ["", "## Changes since the previous version", ""]
    d = facts.get("diff")
    if not d:
        md += ["This is the first version under this name."]
    else:
        md += [f"Against v{d['previous']}: {d['added']} images added, {d['removed']} removed, {d['kept']} kept; "
               f"classes added: {', '.join(d['classes_added']) or 'none'}; classes removed: {', '.join(d['classes_removed']) or 'none'}. "
               "`diff.csv` lists every image added or removed, with its reason."]
        if d.get("warning"):
            md += ["", f"**Warning:** {d['warning']}."]
        reasons = [["removed", k, v] for k, v in (d.get("removed_by_reason") or {}).items()]
        reasons += [["added", k, v] for k, v in (d.get("added_by_reason") or {}).items()]
        if reasons:
            md += [""] + _table(["change", "reason", "images"], reasons)
    md += ["", "## Left out", ""]
    md += _table(["reason", "images"], [[k, v] for k, v in facts["excluded"].items()]) if facts["excluded"] else ["Nothing was left out."]
    md += ["", "## Known limitations", ""]
    md += [f"- {line}" for line in facts["limitations"]]
    md += ["", "## How to load", "", "Run these from the export's folder (the one holding this README)."]
    for layout in facts["layouts"]:
        md += ["", LAYOUTS[layout].how_to_load(e["name"]).rstrip()] if layout in LAYOUTS else []
    md += ["", "## Files and checksums", "",
           f"`manifest.json` lists the sha256 of every file; `python manage.py verify_export {e['name']}/v{e['version']}` re-checks them. "
           "The listings and tables:", ""]
    md += _table(["file", "sha256"], [[f"`{k}`", f"`{v}`"] for k, v in facts["checksums"].items()])
    return "\n".join(yaml) + "\n\n" + "\n".join(md) + "\n"


# -- HTML for the export's page ----------------------------------------------------------------

_INLINE = re.compile(r"`([^`]+)`|\*\*([^*]+)\*\*")


def _inline(text: str) -> str:
    """Escaped text with this module's inline marks: `code` and **bold**."""
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos:m.start()]))
        out.append(f"<code>{html.escape(m.group(1))}</code>" if m.group(1) is not None else f"<strong>{html.escape(m.group(2))}</strong>")
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out).replace("\\|", "|")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def to_html(text: str) -> str:
    """The datasheet as HTML, for the subset of Markdown ``render`` writes (headings, tables,
    lists, fenced code, paragraphs, `code`, **bold**); everything else is escaped text. The
    card's YAML header comes first as a preformatted block."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    if lines and lines[0] == "---":
        end = lines.index("---", 1) if "---" in lines[1:] else 0
        if end:
            out.append(f'<pre class="card-header">{html.escape(chr(10).join(lines[1:end]))}</pre>')
            i = end + 1
    para: list[str] = []

    def flush() -> None:
        if para:
            out.append(f"<p>{_inline(' '.join(para))}</p>")
            para.clear()

    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            flush()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            lang = line[3:].strip()
            out.append(f'<pre><code class="language-{html.escape(lang)}">{html.escape(chr(10).join(lines[i + 1:j]))}</code></pre>')
            i = j + 1
            continue
        heading = re.match(r"(#{1,4}) (.*)", line)
        if heading:
            flush()
            level = len(heading.group(1))
            out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        elif line.startswith("|"):
            flush()
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i])
                i += 1
            head, body = _cells(rows[0]), [_cells(r) for r in rows[2:]]
            out.append("<table class=\"grid datasheet-table\"><thead><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr></thead><tbody>"
                       + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in body) + "</tbody></table>")
            continue
        elif line.startswith("- "):
            flush()
            items: list[str] = []
            while i < len(lines) and (lines[i].startswith("- ") or (lines[i].startswith("  ") and items)):
                if lines[i].startswith("- "):
                    items.append(lines[i][2:])
                else:
                    items[-1] += " " + lines[i].strip()
                i += 1
            out.append("<ul>" + "".join(f"<li>{_inline(x)}</li>" for x in items) + "</ul>")
            continue
        elif not line.strip():
            flush()
        else:
            para.append(line.strip())
        i += 1
    flush()
    return "\n".join(out)
