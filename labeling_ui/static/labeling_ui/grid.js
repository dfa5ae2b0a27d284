// Grid review: a page of one class's thumbnails. Arrows move the cursor, O/I/U/N/S mark the tile
// under it (I takes the ID class as on the single-image screen), Space opens it large, Enter records
// every unmarked tile as ood and sends the page (one request, which brings the next page), Z takes
// the last page back. Keys, the ID choice and keys typed while a page is sent are the shared
// screen controller's (screen.js).
(function () {
  "use strict";
  const root = document.getElementById("grid-review");
  const $ = (id) => document.getElementById(id);
  const api = { next: root.dataset.next, submit: root.dataset.submit, undo: root.dataset.undo, front: root.dataset.front };
  const imageUrl = (id, variant) => `${root.dataset.images}${id}/${variant}`;
  const { call, el } = window.OODScreen;
  const MIN = Number(root.dataset.min), MAX = Number(root.dataset.max);
  const SIZES = [12, 24, 35, 48, 60, 77, 96].filter((n) => n >= MIN && n <= MAX);
  const LETTER = { ood: "O", id: "I", unclear: "U", not_target: "N", skip: "S" };

  let size = Number(localStorage.getItem("oodc-grid-size")) || Number(root.dataset.size);
  if (!(size >= MIN && size <= MAX)) size = Number(root.dataset.size);
  let tiles = [], cursor = 0, cls = null, progress = null, shownAt = 0, pages = 0;
  let progressAt = 0, sinceProgress = 0;  // the server's count is asked for every few pages; counted here in between
  const marks = new Map();   // assignment -> {decision, wnids, note}: this page's marks, until it is sent
  const sent = [];           // the marks of the pages sent, newest last (what undo brings back)
  const zoom = window.OODZoom($("stage"), $("photo"), $("zoom-level"));
  const status = (text, kind) => screen.status(text, kind);
  const viewing = () => !$("tile-view").hidden;

  // -- layout: the page fills the area without scrolling ------------------------------------------
  function layout() {
    const area = $("tiles-area").getBoundingClientRect();
    const n = Math.max(tiles.length, 1), gap = 4;
    let best = { side: 0, cols: 1 };
    for (let c = 1; c <= n; c++) {
      const rows = Math.ceil(n / c);
      const side = Math.floor(Math.min((area.width - 8 - gap * (c - 1)) / c, (area.height - 8 - gap * (rows - 1)) / rows));
      if (side > best.side) best = { side, cols: c };
    }
    const grid = $("tiles");
    grid.style.gridTemplateColumns = `repeat(${best.cols}, ${best.side}px)`;
    grid.style.setProperty("--tile", `${best.side}px`);
    grid.dataset.cols = best.cols;
    $("size-label").textContent = `${size} per page`;
  }
  new ResizeObserver(() => layout()).observe($("tiles-area"));  // the window, or the key bar growing a line

  // -- the page -----------------------------------------------------------------------------------
  function tileEl(t, i) {
    const top = t.top5[0];
    const cap = el("div", { class: "cap" }, el("span", { class: "t1", text: top ? top.label : "—" }),
      el("span", { class: "msp", text: top ? `${Math.round(100 * top.prob)}%` : "" }));
    const d = el("div", { class: "tile", role: "gridcell", "data-i": String(i), "data-assignment": String(t.assignment),
                          "data-image": String(t.image), title: top ? `${t.path} · top-1 ${top.label} (MSP ${top.prob.toFixed(2)})` : t.path },
      el("img", { alt: `image ${t.image}`, draggable: "false" }),
      el("span", { class: "badge" }), cap);
    d.addEventListener("click", (ev) => { moveTo(i); if (ev.detail === 2) openView(); });
    return d;
  }
  // -- thumbnails: a page's in one request (api/images/thumbs), the next page's while this one is
  // decided; one request per tile only if that fails -------------------------------------------
  const thumbs = new Map();   // image id -> data URL (this page's and the next page's)
  let preloaded = [];         // the next page's, decoded ahead (held so they are not dropped)
  async function fetchThumbs(ids) {
    const want = [...new Set(ids)].filter((id) => !thumbs.has(id));
    if (!want.length) return;
    const r = await fetch(`${root.dataset.thumbs}?ids=${want.join(",")}`, { credentials: "same-origin" });
    if (!r.ok) throw new Error(`thumbnails: ${r.status}`);
    const data = await r.json();
    for (const [id, url] of Object.entries(data.thumbs || {})) thumbs.set(Number(id), url);
  }
  function showThumbs() {
    const imgs = $("tiles").querySelectorAll(".tile img");
    tiles.forEach((t, i) => { if (imgs[i] && !imgs[i].src && thumbs.has(t.image)) imgs[i].src = thumbs.get(t.image); });
  }
  function fallbackThumbs() {  // each tile's own URL: slower, but the page is never left blank
    const imgs = $("tiles").querySelectorAll(".tile img");
    tiles.forEach((t, i) => { if (imgs[i] && !imgs[i].src) imgs[i].src = imageUrl(t.image, "thumb"); });
  }
  let shownPage = 0;  // which render the thumbnails being fetched are for
  function loadThumbs(prefetch) {
    const page = tiles.map((t) => t.image), mine = ++shownPage;
    const keep = new Set([...page, ...prefetch]);
    for (const id of [...thumbs.keys()]) if (!keep.has(id)) thumbs.delete(id);
    showThumbs();
    // the fallback is for this page only: a later page (sent meanwhile) fetches its own
    fetchThumbs(page).then(showThumbs).catch(() => {}).finally(() => { if (mine === shownPage) fallbackThumbs(); })
      .then(() => fetchThumbs(prefetch)).then(() => {
        // decoded ahead too, so the next page paints at once
        preloaded = prefetch.filter((id) => thumbs.has(id)).map((id) => { const im = new Image(); im.src = thumbs.get(id); return im; });
        if (mine === shownPage) root.dataset.ahead = String(preloaded.length);  // the next page's thumbnails held
      }).catch(() => { preloaded = []; });  // the next page fetches its own when it is shown
  }
  function paintTile(i) {
    const t = tiles[i], d = $("tiles").children[i];
    if (!t || !d) return;
    const m = marks.get(t.assignment);
    d.className = "tile" + (i === cursor ? " cursor" : "") + (m ? ` marked m-${m.decision}` : "");
    d.dataset.mark = m ? m.decision : "";
    d.querySelector(".badge").textContent = m ? LETTER[m.decision] + (m.decision === "id" ? ` ${m.wnids.length}` : "") : "";
  }
  function showPanel() {
    const t = tiles[cursor];
    $("cursor-at").textContent = t ? `${cursor + 1} of ${tiles.length}` : "";
    $("top5").replaceChildren(...(t ? t.top5 : []).map((p) => el("li", { "data-wnid": p.wnid, "data-rank": String(p.rank) },
      el("div", { class: "row" }, el("kbd", { text: String(p.rank) }), el("strong", { text: p.label }),
        el("span", { class: "prob", text: `${(100 * p.prob).toFixed(1)}%` })),
      el("div", { class: "gloss small", text: p.gloss }))));
    const m = t && marks.get(t.assignment);
    if (m && m.decision === "id") m.wnids.forEach((w) => { const li = document.querySelector(`#top5 li[data-wnid="${w}"]`); if (li) li.classList.add("picked"); });
  }
  function showProgress() {
    if (!progress) return;
    $("progress-left").textContent = `${progress.left} of ${progress.total} left in your queue`;
    $("progress-today").textContent = `${progress.done_today} done today`;
    $("progress-pace").textContent = progress.median_seconds === null ? "" : `median ${progress.median_seconds} s per image`;
    $("empty-summary").textContent = `You reviewed ${progress.done_today} image${progress.done_today === 1 ? "" : "s"} today.`;
  }
  function render(data) {
    screen.leaveId();
    closeView();
    tiles = data.tiles || [];
    cls = data.class;
    if (data.progress) { progress = data.progress; progressAt = performance.now(); sinceProgress = 0; }
    let restored = 0;  // marks kept in this browser from before a reload or a closed tab
    for (const [a, m] of storedMarks()) if (!marks.has(a) && tiles.some((t) => t.assignment === a)) { marks.set(a, m); restored += 1; }
    for (const a of [...marks.keys()]) if (!tiles.some((t) => t.assignment === a)) marks.delete(a);
    keepMarks();
    root.dataset.restored = String(restored);
    cursor = 0;
    // busy: images are waiting but another annotator was leasing them at this instant; the page
    // is asked for again (never the "finished" panel while work is left)
    const busy = !tiles.length && data.busy === true;
    root.classList.toggle("is-empty", !tiles.length && !busy);
    root.classList.toggle("is-busy", busy);
    $("empty").hidden = !!tiles.length || busy;
    if (busy) askAgain();
    document.querySelectorAll("button.decide, #send").forEach((b) => { b.disabled = !tiles.length; });
    $("ood-label").textContent = cls ? cls.label : "Queue finished";
    $("ood-gloss").textContent = cls ? cls.gloss : "";
    $("source").textContent = cls ? `· ${cls.source}` : "";
    $("closest").replaceChildren(...(cls ? cls.closest : []).map((c) => el("li", { title: c.gloss, "data-wnid": c.wnid },
      el("strong", { text: c.label }), el("span", { class: "muted small", text: ` ${Math.round(100 * c.share)}% of top-1s` }))));
    $("tiles").replaceChildren(...tiles.map(tileEl));
    tiles.forEach((_t, i) => paintTile(i));
    layout();
    showPanel();
    showProgress();
    shownAt = performance.now();
    root.dataset.page = String(pages);
    delete root.dataset.ahead;
    // this page's thumbnails, then the next page's (more of this class, or the next class's
    // first page), loading while this one is decided
    loadThumbs(data.prefetch || []);
  }

  function moveTo(i) {
    if (!tiles.length) return;
    const old = cursor;
    cursor = Math.max(0, Math.min(tiles.length - 1, i));
    paintTile(old); paintTile(cursor);
    if (screen.mode() === "id") screen.leaveId();
    showPanel();
    const d = $("tiles").children[cursor];
    if (d && d.scrollIntoView) d.scrollIntoView({ block: "nearest" });
    if (viewing()) showView();
  }
  function move(dx, dy) {
    const cols = Number($("tiles").dataset.cols) || 1;
    moveTo(cursor + dx + dy * cols);
  }

  // -- one tile, large ----------------------------------------------------------------------------
  function showView() {
    const t = tiles[cursor];
    if (!t) return;
    $("dims").textContent = `${t.width}×${t.height}`;
    $("path").textContent = t.path;
    $("photo").dataset.image = t.image;
    zoom.show(imageUrl(t.image, "view"), imageUrl(t.image, "full"), t.width, t.height);
  }
  function openView() { if (!tiles[cursor]) return; $("tile-view").hidden = false; root.classList.add("viewing"); showView(); }
  function closeView() { $("tile-view").hidden = true; root.classList.remove("viewing"); }

  // -- marks, pages -------------------------------------------------------------------------------
  // The page's marks are kept in this browser until the page is sent: the page's leases come
  // back after a reload or a closed tab, and so do the marks made on it.
  const MARKS_KEY = "oodc-grid-marks";
  function storedMarks() {
    try { return new Map(JSON.parse(localStorage.getItem(MARKS_KEY) || "[]")); } catch (e) { return new Map(); }
  }
  function keepMarks() {
    try { if (marks.size) localStorage.setItem(MARKS_KEY, JSON.stringify([...marks])); else localStorage.removeItem(MARKS_KEY); } catch (e) { /* storage full or off: marks live on screen only */ }
  }
  function mark(decision, wnids) {
    const t = tiles[cursor];
    if (!t) return;
    const note = $("note").value.trim();
    marks.set(t.assignment, { decision, wnids: wnids || [], note });
    keepMarks();
    $("note").value = "";
    paintTile(cursor);
    const what = decision === "id" ? `id (${wnids.join(", ")})` : decision;
    status(`Tile ${cursor + 1}: ${what}. ${marks.size} marked; Enter records the other ${tiles.length - marks.size} as ood.`, "ok");
    if (viewing()) closeView();
    if (cursor < tiles.length - 1) moveTo(cursor + 1); else showPanel();
  }
  function clearMark() {
    const t = tiles[cursor];
    if (t && marks.delete(t.assignment)) { keepMarks(); paintTile(cursor); showPanel(); status(`Tile ${cursor + 1}: mark removed.`); }
  }

  let busyTries = 0;
  function askAgain() {
    busyTries += 1;
    status(`Others are taking images from the queue at this moment; asking again (try ${busyTries})…`);
    setTimeout(() => screen.run(() => load()), Math.min(3000, 300 * busyTries));
  }

  async function load() {
    status("Loading…");
    try {
      render(await call(`${api.next}?size=${size}`));
      if (root.classList.contains("is-busy")) return true;
      busyTries = 0;
      const kept = Number(root.dataset.restored);
      status(kept ? `Your ${kept} mark${kept === 1 ? "" : "s"} on this page from before ${kept === 1 ? "is" : "are"} back; Enter sends the page.`
        : tiles.length ? "Ready: arrows move, O/I/U/N mark, Enter sends the page (the rest as ood). ? for the keys." : "", kept ? "ok" : undefined);
      return true;
    } catch (e) { status(`Could not load your page: ${e.message}. Reload to try again.`, "error"); return false; }
  }

  async function send() {
    if (!tiles.length) return false;
    const explicit = new Map(marks);
    const payload = tiles.map((t) => ({ assignment: t.assignment, ...(marks.get(t.assignment) || { decision: "ood", wnids: [], note: "" }) }));
    const counts = {};
    payload.forEach((m) => { counts[m.decision] = (counts[m.decision] || 0) + 1; });
    status(`Sending the page (${payload.length} tiles)…`);
    try {
      const ask = !progress || sinceProgress >= 3 || performance.now() - progressAt > 20000;
      const data = await call(api.submit, { marks: payload, seconds: (performance.now() - shownAt) / 1000, size, progress: ask });
      if (!data.progress && progress && !data.saved.replays) {  // this page, counted here until the server is asked again
        const own = tiles.filter((t) => !t.gold);
        progress.left = Math.max(0, progress.left - own.length);
        progress.done_today += own.filter((t) => (marks.get(t.assignment) || { decision: "ood" }).decision !== "skip").length;
        sinceProgress += 1;
      }
      sent.push(explicit);
      pages += 1;
      marks.clear();
      render(data);
      const summary = Object.entries(counts).map(([d, n]) => `${n} ${d}`).join(", ");
      status(`Saved page: ${summary} · Z takes it back`, "ok");
      return true;
    } catch (e) {
      status(`Page not saved: ${e.message}. Nothing on it was recorded; your marks are still here, try again.`, "error");
      return false;
    }
  }

  async function undo() {
    status("Taking back the last page…");
    try {
      const data = await call(api.undo, { size });
      const restored = sent.pop() || new Map();
      for (const [a, m] of restored) marks.set(a, m);
      render(data);
      status(`The last page was taken back (${data.undone} decisions): its images are here with your marks; Enter sends it again.`, "ok");
      return true;
    } catch (e) { status(e.message, "error"); return false; }
  }

  async function resize(delta) {
    const i = SIZES.findIndex((n) => n >= size);
    const next = SIZES[Math.max(0, Math.min(SIZES.length - 1, (i < 0 ? SIZES.length - 1 : i) + delta))];
    if (next === size) { status(`${size} tiles per page is the ${delta > 0 ? "most" : "fewest"} there can be.`); return true; }
    size = next;
    localStorage.setItem("oodc-grid-size", String(size));
    return load();
  }

  async function moreLikeThis() {
    const t = tiles[cursor];
    if (!t) return false;
    try {
      const data = await call(api.front, { assignment: t.assignment });
      status(`Tile ${cursor + 1}: ${data.moved} open image${data.moved === 1 ? "" : "s"} most like it moved to the front of the queue.`, "ok");
      return true;
    } catch (e) { status(`Not moved: ${e.message}`, "error"); return false; }
  }

  const screen = window.OODScreen({
    root, classesUrl: root.dataset.classes,
    top5: () => (tiles[cursor] ? tiles[cursor].top5 : []),
    record: (decision, wnids) => mark(decision, wnids),
    direct: { o: "ood", u: "unclear", n: "not_target", s: "skip" },
    idPrompt: "ID visible on this tile: 1–5 for one of its top-5 classes (Shift adds more), type a name (or /) to search all ID classes, Esc to cancel.",
    keys: {
      Enter: () => send(), z: () => undo(), "+": () => resize(1), "=": () => resize(1), "-": () => resize(-1),
      Backspace: () => clearMark(), Delete: () => clearMark(), m: () => moreLikeThis(),
    },
    before: (e, mode) => {
      if (viewing()) {
        if (e.key === "Escape" || e.key === " ") { closeView(); return true; }
        if (zoom.key(e, mode !== "id")) return true;
      }
      if (mode === "id") return false;
      const arrows = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, -1], ArrowDown: [0, 1] }[e.key];
      if (arrows && !viewing()) { move(...arrows); return true; }
      if (e.key === " ") { openView(); return true; }
      return false;
    },
  });

  $("send").addEventListener("click", (ev) => { ev.currentTarget.blur(); if (!screen.busy()) screen.run(() => send()); });
  $("undo").addEventListener("click", (ev) => { ev.currentTarget.blur(); if (!screen.busy()) screen.run(() => undo()); });
  $("more").addEventListener("click", (ev) => { ev.currentTarget.blur(); if (!screen.busy()) screen.run(() => resize(1)); });
  $("fewer").addEventListener("click", (ev) => { ev.currentTarget.blur(); if (!screen.busy()) screen.run(() => resize(-1)); });
  $("tile-view").addEventListener("dblclick", () => {});
  screen.run(() => load());
})();
