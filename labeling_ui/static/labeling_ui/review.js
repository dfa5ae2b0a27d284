// The review screen: keyboard-driven, one decision per key, saved before the next image shows.
(function () {
  "use strict";
  const root = document.getElementById("review");
  const $ = (id) => document.getElementById(id);
  const api = { next: root.dataset.next, submit: root.dataset.submit, undo: root.dataset.undo, classes: root.dataset.classes };
  const imageUrl = (id, variant) => `${root.dataset.images}${id}/${variant}`;
  const csrf = (document.cookie.match(/(?:^|; )csrftoken=([^;]+)/) || [])[1] || "";

  let items = [];          // leased images: [0] on screen, [1] prefetched
  let mode = "decide";     // decide | id
  let chosen = [];         // [{wnid, label}] picked while deciding "id"
  let busy = false;
  let shownAt = 0;
  let sessionCount = 0;
  let progress = null;     // {left, total, done_today, median_seconds} from the server
  let progressAt = 0;      // when the server last said it
  let sinceProgress = 0;   // decisions counted here since
  const zoom = window.OODZoom($("stage"), $("photo"), $("zoom-level"));

  function status(text, kind) {
    const el = $("status");
    el.textContent = text;
    el.className = "status" + (kind ? " " + kind : "");
  }

  async function call(url, body) {
    const opts = body === undefined ? { headers: { Accept: "application/json" } }
      : { method: "POST", headers: { "Content-Type": "application/json", "X-CSRFToken": decodeURIComponent(csrf), Accept: "application/json" },
          body: JSON.stringify(body) };
    const r = await fetch(url, { credentials: "same-origin", ...opts });
    let data = {};
    try { data = await r.json(); } catch (e) { /* not JSON: handled below */ }
    if (r.status === 401) { window.location = "/accounts/login/?next=" + encodeURIComponent(location.pathname); throw new Error("logged out"); }
    if (!r.ok) throw new Error(data.error || `server answered ${r.status}`);
    return data;
  }

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const c of children) if (c) e.append(c);
    return e;
  }

  function preload(item) {
    if (!item) return;
    new Image().src = imageUrl(item.image, "view");
    for (const t of item.top5) for (const ex of t.examples) new Image().src = imageUrl(ex, "thumb");
  }

  function showProgress() {
    if (!progress) return;
    $("progress-left").textContent = `${progress.left} of ${progress.total} left in your queue`;
    $("progress-today").textContent = `${progress.done_today} done today`;
    $("progress-pace").textContent = progress.median_seconds === null ? "" : `median ${progress.median_seconds} s per image`;
    $("empty-summary").textContent = `You reviewed ${progress.done_today} image${progress.done_today === 1 ? "" : "s"} today` +
      (progress.median_seconds === null ? "." : `, a median of ${progress.median_seconds} s each.`);
  }

  function render() {
    leaveIdMode();
    const item = items[0];
    $("empty").hidden = !!item;
    $("photo").hidden = !item;
    root.classList.toggle("is-empty", !item);
    // at the end of the queue nothing can be decided: the decision keys are switched off
    document.querySelectorAll("button.decide, .zoom-keys button").forEach((b) => { b.disabled = !item; });
    showProgress();
    if (!item) {
      $("ood-label").textContent = "Queue finished"; $("ood-gloss").textContent = ""; $("top5").replaceChildren(); $("path").textContent = "";
      $("dims").textContent = ""; $("source").textContent = ""; $("zoom-level").textContent = "";
      $("photo").removeAttribute("src"); delete $("photo").dataset.image;
      return;
    }
    const photo = $("photo");
    let counted = false;
    photo.onload = () => { if (!counted) { counted = true; shownAt = performance.now(); } };
    zoom.show(imageUrl(item.image, "view"), imageUrl(item.image, "full"), item.width, item.height);
    photo.dataset.image = item.image;
    $("dims").textContent = `${item.width}×${item.height}`;
    $("path").textContent = item.path;
    $("source").textContent = `· ${item.source}`;
    $("ood-label").textContent = item.ood_class.label;
    $("ood-gloss").textContent = item.ood_class.gloss || "";
    const list = $("top5");
    list.replaceChildren(...item.top5.map((t) => {
      const strip = el("div", { class: "examples" }, ...t.examples.map((ex) => el("img", { src: imageUrl(ex, "thumb"), alt: `ID example of ${t.label}`, loading: "lazy" })));
      return el("li", { "data-wnid": t.wnid, "data-rank": t.rank },
        el("div", { class: "row" }, el("kbd", { text: String(t.rank) }), el("strong", { text: t.label }),
          el("span", { class: "prob", text: `${(100 * t.prob).toFixed(1)}%` })),
        el("div", { class: "bar-bg" }, el("div", { class: "bar-fg", style: `width:${Math.max(1, Math.round(100 * t.prob))}%` })),
        el("div", { class: "lemmas small muted", text: t.lemmas.join(", ") }),
        el("div", { class: "gloss small", text: t.gloss }),
        t.examples.length ? strip : null);
    }));
    preload(items[1]);
    if (!photo.complete) shownAt = performance.now();
  }

  async function load() {
    status("Loading…");
    try {
      const data = await call(api.next);
      items = data.items; progress = data.progress || progress; progressAt = performance.now(); sinceProgress = 0;
      render();
      status(items.length ? "Ready. Press ? for the keys." : "");
    } catch (e) { status(`Could not load your queue: ${e.message}. Reload to try again.`, "error"); }
  }

  async function decide(decision, wnids) {
    const item = items[0];
    if (!item || busy) return;
    busy = true;
    root.classList.add("saving");
    status("Saving…");
    const seconds = shownAt ? (performance.now() - shownAt) / 1000 : null;
    try {
      const have = items.slice(1).map((x) => x.assignment);  // the prefetched ones: not sent again
      // the server's count costs a few queries: asked for every 5 decisions, every 10 s, and near the end
      const ask = !progress || sinceProgress >= 4 || performance.now() - progressAt > 10000 || items.length < 2;
      const data = await call(api.submit, { assignment: item.assignment, decision, wnids: wnids || [], note: $("note").value, seconds, have,
                                            progress: ask });
      if (!data.saved.replay && decision !== "skip") sessionCount += 1;
      $("note").value = "";
      const known = new Map(items.map((x) => [x.assignment, x]));
      items = data.items.map((x) => (x.known ? known.get(x.assignment) : x)).filter(Boolean);
      if (data.progress) { progress = data.progress; progressAt = performance.now(); sinceProgress = 0; }
      else if (progress && !data.saved.replay) {  // this decision, counted here until the server is asked again
        progress.left = Math.max(0, progress.left - 1);
        if (decision !== "skip") progress.done_today += 1;
        sinceProgress += 1;
      }
      render();
      const what = decision === "id" ? `id (${wnids.join(", ")})` : decision;
      status(`Saved: ${what} · ${sessionCount} reviewed this session`, "ok");
    } catch (e) {
      status(`Not saved: ${e.message}. Your decision was not recorded; try again.`, "error");
    } finally {
      busy = false;
      root.classList.remove("saving");
    }
  }

  async function undo() {
    if (busy) return;
    busy = true;
    status("Undoing…");
    try {
      const data = await call(api.undo, {});
      items = data.items; progress = data.progress || progress; progressAt = performance.now(); sinceProgress = 0;
      sessionCount = Math.max(0, sessionCount - 1);
      render();
      status("Your last decision was taken back: decide this image again.", "ok");
    } catch (e) { status(e.message, "error"); } finally { busy = false; }
  }

  // -- "id": which ID class ------------------------------------------------------------------------
  function enterIdMode() {
    if (!items[0]) return;
    mode = "id";
    chosen = [];
    root.classList.add("id-mode");
    $("id-search").hidden = false;
    showChosen();
    status("ID visible: press 1–5 for a top-5 class, / to search all ID classes, Esc to cancel.");
  }

  function leaveIdMode() {
    mode = "decide";
    chosen = [];
    root.classList.remove("id-mode");
    $("id-search").hidden = true;
    idSearch.clear();
    $("chosen").hidden = true;
    document.querySelectorAll("#top5 li.picked").forEach((li) => li.classList.remove("picked"));
  }

  function showChosen() {
    const box = $("chosen");
    box.hidden = chosen.length === 0;
    box.textContent = chosen.length ? `Chosen: ${chosen.map((c) => c.label).join(", ")} — Enter records, Esc cancels` : "";
  }

  function pick(wnid, label, more) {
    if (!chosen.some((c) => c.wnid === wnid)) chosen.push({ wnid, label });
    const li = document.querySelector(`#top5 li[data-wnid="${wnid}"]`);
    if (li) li.classList.add("picked");
    if (more) { showChosen(); return; }
    decide("id", chosen.map((c) => c.wnid));
  }

  const idSearch = window.OODIdSearch(api.classes, $("search"), $("results"), (wnid, label, more) => {
    pick(wnid, label, more);
    if (more) idSearch.clear();
  }, (msg) => status(msg, "error"));

  // -- overlays ------------------------------------------------------------------------------------
  function toggleHelp(force) { const h = $("help"); h.hidden = force === undefined ? !h.hidden : !force; }

  // -- keys ----------------------------------------------------------------------------------------
  const DIRECT = { o: "ood", u: "unclear", n: "not_target", s: "skip" };

  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const target = e.target;
    if (!$("help").hidden) { if (e.key === "Escape" || e.key === "?") { toggleHelp(false); e.preventDefault(); } return; }
    if (target === $("note")) {
      if (e.key === "Enter" || e.key === "Escape") { $("note").blur(); e.preventDefault(); }
      return;
    }
    if (target === $("search")) {
      if (e.key === "ArrowDown") { idSearch.move(1); e.preventDefault(); }
      else if (e.key === "ArrowUp") { idSearch.move(-1); e.preventDefault(); }
      else if (e.key === "Enter") {
        e.preventDefault();
        const c = idSearch.current();
        if (c) { pick(c[0], c[1], e.shiftKey); if (e.shiftKey) idSearch.clear(); }
        else if (chosen.length) decide("id", chosen.map((x) => x.wnid));
      } else if (e.key === "Escape") { $("search").blur(); e.preventDefault(); }
      return;
    }
    if (items[0] && zoom.key(e, mode !== "id")) { e.preventDefault(); return; }
    if (busy) { e.preventDefault(); return; }
    const key = e.key.toLowerCase();
    if (mode === "id") {
      const digit = /^Digit([1-5])$/.exec(e.code) || /^Numpad([1-5])$/.exec(e.code);
      if (digit) {
        const t = items[0] && items[0].top5[Number(digit[1]) - 1];
        if (t) pick(t.wnid, t.label, e.shiftKey);
        e.preventDefault();
        return;
      }
      if (e.key === "/") { e.preventDefault(); idSearch.open(); return; }
      if (e.key === "Enter") { e.preventDefault(); if (chosen.length) decide("id", chosen.map((x) => x.wnid)); return; }
      if (e.key === "Escape") { e.preventDefault(); leaveIdMode(); status("ID choice cancelled."); return; }
    }
    if (DIRECT[key]) { e.preventDefault(); leaveIdMode(); decide(DIRECT[key]); }
    else if (key === "i") { e.preventDefault(); enterIdMode(); }
    else if (key === "z") { e.preventDefault(); undo(); }
    else if (key === "t") { e.preventDefault(); $("note").focus(); }
    else if (e.key === "?") { e.preventDefault(); toggleHelp(); }
  });

  $("search").addEventListener("focus", () => root.classList.add("searching"));
  $("search").addEventListener("blur", () => root.classList.remove("searching"));
  document.querySelectorAll("button.decide").forEach((b) => b.addEventListener("click", () => {
    const d = b.dataset.decision;
    if (d === "id") enterIdMode(); else decide(d);
    b.blur();
  }));
  $("undo").addEventListener("click", (ev) => { undo(); ev.currentTarget.blur(); });
  document.querySelectorAll("button[data-zoom]").forEach((b) => b.addEventListener("click", () => { zoom.set(b.dataset.zoom); b.blur(); }));
  $("help-btn").addEventListener("click", (ev) => { toggleHelp(); ev.currentTarget.blur(); });
  $("help-close").addEventListener("click", () => toggleHelp(false));
  $("top5").addEventListener("click", (ev) => {
    const li = ev.target.closest("li[data-wnid]");
    if (li && mode === "id") pick(li.dataset.wnid, li.querySelector("strong").textContent, ev.shiftKey);
  });
  load();
})();
