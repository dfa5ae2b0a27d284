// The review screen: keyboard-driven, one decision per key, saved before the next image shows.
// Keys, the "id" choice and keys typed ahead are the shared screen controller's (screen.js).
(function () {
  "use strict";
  const root = document.getElementById("review");
  const $ = (id) => document.getElementById(id);
  const api = { next: root.dataset.next, submit: root.dataset.submit, undo: root.dataset.undo, classes: root.dataset.classes,
                front: root.dataset.front };
  const imageUrl = (id, variant) => `${root.dataset.images}${id}/${variant}`;
  const { call, el } = window.OODScreen;

  let items = [];          // leased images: [0] on screen, [1] prefetched
  let shownAt = 0;
  let sessionCount = 0;
  let progress = null;     // {left, total, done_today, median_seconds} from the server
  let progressAt = 0;      // when the server last said it
  let sinceProgress = 0;   // decisions counted here since
  const zoom = window.OODZoom($("stage"), $("photo"), $("zoom-level"));
  const status = (text, kind) => screen.status(text, kind);

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
    screen.leaveId();
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

  async function decide(decision, wnids, labels) {
    const item = items[0];
    if (!item) return false;
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
      const names = (wnids || []).map((w, i) => (labels && labels[i] ? `${labels[i]} (${w})` : w));
      const what = decision === "id" ? `id: ${names.join(", ")}` : decision;
      status(`Saved: ${what} · ${sessionCount} reviewed this session`, "ok");
      return true;
    } catch (e) {
      status(`Not saved: ${e.message}. Your decision was not recorded; try again.`, "error");
      return false;
    }
  }

  async function undo() {
    status("Undoing…");
    try {
      const data = await call(api.undo, {});
      items = data.items; progress = data.progress || progress; progressAt = performance.now(); sinceProgress = 0;
      sessionCount = Math.max(0, sessionCount - 1);
      render();
      status("Your last decision was taken back: decide this image again.", "ok");
      return true;
    } catch (e) { status(e.message, "error"); return false; }
  }

  async function moreLikeThis(item) {
    if (!item) return false;
    try {
      const data = await call(api.front, { assignment: item.assignment });
      status(`${data.moved} open image${data.moved === 1 ? "" : "s"} most like this one moved to the front of the queue.`, "ok");
      return true;
    } catch (e) { status(`Not moved: ${e.message}`, "error"); return false; }
  }

  const screen = window.OODScreen({
    root, classesUrl: api.classes,
    top5: () => (items[0] ? items[0].top5 : []),
    record: (decision, wnids, labels) => decide(decision, wnids, labels),
    direct: { o: "ood", u: "unclear", n: "not_target", s: "skip" },
    keys: { z: () => undo(), m: () => moreLikeThis(items[0]) },
    before: (e, mode) => !!items[0] && zoom.key(e, mode !== "id"),
  });

  $("undo").addEventListener("click", (ev) => { ev.currentTarget.blur(); if (!screen.busy()) screen.run(() => undo()); });
  document.querySelectorAll("button[data-zoom]").forEach((b) => b.addEventListener("click", () => { zoom.set(b.dataset.zoom); b.blur(); }));
  load();
})();
