// Class search in the browser: the one ranking rule of pipelines/classes/search.py, written again
// here because the review and adjudication screens search the ID classes without a round trip (the
// list Enter records is the list on screen, never a late answer to an earlier key).
// tests/test_class_search_browser.py checks that this copy and the Python one give the same lists.
//
// Tiers, best first: 0 the name is the text, 1 another lemma is, 2 the name starts with it,
// 3 a later word of the name does, 4 a lemma or a word of one does, 5 a name or lemma contains it,
// 6 the gloss does, 7 the wnid does; ties in the order given. Texts are folded alike: lower case,
// runs of spaces, underscores and hyphens one space, none at the ends.
(function () {
  "use strict";
  const SEP = /[ \t\n\r\f\v_-]+/g;
  function fold(text) { return String(text || "").toLowerCase().replace(SEP, " ").replace(/^ +| +$/g, ""); }

  function folded(name, lemmas, gloss, wnid) {
    const n = fold(name), seen = new Set(), rest = [];
    for (const x of lemmas || []) {
      const k = fold(x);
      if (seen.has(k)) continue;
      seen.add(k);
      if (k && k !== n) rest.push(k);
    }
    return { name: n, lemmas: rest, gloss: fold(gloss), wnid: String(wnid || "").toLowerCase() };
  }

  function tier(q, f) {
    if (f.name === q) return 0;
    if (f.lemmas.includes(q)) return 1;
    if (f.name.startsWith(q)) return 2;
    if ((" " + f.name).includes(" " + q)) return 3;
    if (f.lemmas.some((k) => k.startsWith(q) || (" " + k).includes(" " + q))) return 4;
    if (f.name.includes(q) || f.lemmas.some((k) => k.includes(q))) return 5;
    if (f.gloss.includes(q)) return 6;
    if (f.wnid.includes(q)) return 7;
    return -1;
  }

  // entries: [{name, lemmas: [...], gloss, wnid, ...}] folded once; rank(text, limit) -> [{entry, tier}]
  function ClassIndex(entries) {
    const f = entries.map((e) => folded(e.name, e.lemmas, e.gloss, e.wnid));
    return {
      rank(text, limit) {
        const q = fold(text);
        if (!q) return [];
        const buckets = [[], [], [], [], [], [], [], []];
        for (let i = 0; i < entries.length; i++) {
          const t = tier(q, f[i]);
          if (t >= 0) buckets[t].push({ entry: entries[i], tier: t });
        }
        const out = [].concat(...buckets);
        return limit ? out.slice(0, limit) : out;
      },
    };
  }

  // `text` into `el` with each place the typed `query` occurs marked (<mark>); text nodes only,
  // never HTML, so a class name or a query cannot inject markup
  function highlight(el, text, query) {
    text = String(text || "");
    el.replaceChildren();
    const q = fold(query);
    if (!q) { el.textContent = text; return el; }
    const pattern = q.split(" ").map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("[ \\t\\n\\r\\f\\v_-]+");
    const re = new RegExp(pattern, "gi");
    let at = 0, m;
    while ((m = re.exec(text)) !== null) {
      if (m.index > at) el.append(document.createTextNode(text.slice(at, m.index)));
      const mark = document.createElement("mark");
      mark.textContent = m[0];
      el.append(mark);
      at = m.index + m[0].length;
    }
    if (at < text.length) el.append(document.createTextNode(text.slice(at)));
    return el;
  }

  // the lemma that matched, when the name does not show the text (crossword -> crossword puzzle)
  function matchedLemma(entry, query) {
    const q = fold(query), name = fold(entry.name);
    if (!q || name.includes(q)) return "";
    return (entry.lemmas || []).find((x) => fold(x).includes(q)) || "";
  }

  window.OODClassSearch = { fold, ClassIndex, highlight, matchedLemma };

  // One result row: the name (bold), then the lemma that matched, the wnid and the gloss, the typed text marked
  function resultRow(entry, query, extra) {
    const li = document.createElement("li");
    li.dataset.wnid = entry.wnid || "";
    const name = highlight(document.createElement("strong"), entry.name, query);
    const rest = document.createElement("span");
    rest.className = "muted small";
    const lemma = matchedLemma(entry, query);
    const parts = [lemma, extra || "", entry.wnid, entry.gloss].filter(Boolean);
    highlight(rest, " " + parts.join(" · "), query);
    li.append(name, rest);
    return li;
  }
  window.OODClassSearch.resultRow = resultRow;

  // The type-ahead over every ID class, shared by the review and adjudication screens (the #search
  // input, #results list): arrows move the highlight, the caller decides what Enter does.
  window.OODIdSearch = function (classesUrl, input, list, onPick, onError) {
    let classes = null, index = null, results = [], hl = 0, text = "";
    async function load() {
      if (classes) return;
      try {
        const r = await fetch(classesUrl, { credentials: "same-origin", headers: { Accept: "application/json" } });
        if (!r.ok) throw new Error(`server answered ${r.status}`);
        classes = (await r.json()).classes;
      } catch (e) { classes = []; if (onError) onError(`Could not load the ID classes: ${e.message}`); }
      // rows are [wnid, name, "lemma, lemma", gloss]
      index = ClassIndex(classes.map((c) => ({ wnid: c[0], name: c[1], lemmas: c[2] ? c[2].split(", ") : [], gloss: c[3], row: c })));
    }
    function show() {
      list.replaceChildren(...results.map((hit, i) => {
        const c = hit.entry.row;
        const li = resultRow(hit.entry, text);
        li.className = i === hl ? "hl" : "";
        li.dataset.tier = hit.tier;
        li.addEventListener("mousedown", (ev) => { ev.preventDefault(); onPick(c[0], c[1], ev.shiftKey); });
        return li;
      }));
    }
    function search(value) {
      text = value;
      results = index ? index.rank(value, 8) : [];
      hl = 0;
      show();
    }
    function move(delta) {
      if (!results.length) return;
      hl = (hl + delta + results.length) % results.length;
      [...list.children].forEach((li, i) => li.classList.toggle("hl", i === hl));
    }
    function open() { input.focus(); load().then(() => search(input.value)); }
    function clear() { input.value = ""; text = ""; results = []; list.replaceChildren(); }
    input.addEventListener("input", () => search(input.value));
    return { open, clear, move, search, current: () => (results[hl] ? results[hl].entry.row : undefined) };
  };
})();
