// Grid review: a page of one class's thumbnails. A click marks a tile id with its top-1 class (a
// second click clears it; shift-click does the same to a range), Y does it to the cursor tile,
// a tile's number moves the cursor to it, arrows move it too, O/I/U/N/S mark the cursor tile (I
// takes the ID class as on the single-image screen), holding V shows the tile under the mouse at
// full size (a loupe that follows the mouse), Space opens it large, Enter records every unmarked
// tile as ood and sends the page (one request, which brings the next page), Z takes the last page
// back, + and - change the tile size (the page holds as many as fit; the size is remembered on the
// server). Keys, the ID choice and keys typed while a page is sent are the shared screen
// controller's (screen.js).
(function () {
  "use strict";
  const root = document.getElementById("grid-review");
  const $ = (id) => document.getElementById(id);
  const api = { next: root.dataset.next, submit: root.dataset.submit, undo: root.dataset.undo, front: root.dataset.front };
  const imageUrl = (id, variant) => `${root.dataset.images}${id}/${variant}`;
  const { call, el } = window.OODScreen;
  const MIN = Number(root.dataset.min), MAX = Number(root.dataset.max);
  const TILE_MIN = Number(root.dataset.tileMin), TILE_MAX = Number(root.dataset.tileMax);
  const TILES = [80, 96, 112, 128, 144, 160, 192, 224, 256, 320].filter((n) => n >= TILE_MIN && n <= TILE_MAX);
  const GAP = 4, PAD = 8;
  const LETTER = { ood: "O", id: "I", unclear: "U", not_target: "N", skip: "S" };

  let tile = Number(root.dataset.tile) || 128;  // the tile side the annotator chose (remembered on the server)
  let size = Number(root.dataset.size);        // tiles asked for: as many as fit at that side (fitCount)
  let tiles = [], cursor = 0, cls = null, progress = null, shownAt = 0, pages = 0;
  let anchor = null;  // the last clicked tile and what the click did: a shift-click repeats it up to the tile clicked
  const session = { start: performance.now(), tiles: 0, pages: 0, seconds: 0 };
  let progressAt = 0, sinceProgress = 0;  // the server's count is asked for every few pages; counted here in between
  const marks = new Map();   // assignment -> {decision, wnids, note}: this page's marks, until it is sent
  const sent = [];           // the marks of the pages sent, newest last (what undo brings back)
  const zoom = window.OODZoom($("stage"), $("photo"), $("zoom-level"));
  const status = (text, kind) => screen.status(text, kind);
  const viewing = () => !$("tile-view").hidden;

  // -- layout: the page fills the area without scrolling ------------------------------------------
  // The page asks for as many tiles as fit the area at the chosen side; the tiles are then laid
  // out as large as the area allows (a class's last page, holding its rest, gets smaller ones).
  function fitCount(side) {
    const area = $("tiles-area").getBoundingClientRect();
    const cols = Math.max(1, Math.floor((area.width - PAD + GAP) / (side + GAP)));
    const rows = Math.max(1, Math.floor((area.height - PAD + GAP) / (side + GAP)));
    return Math.max(MIN, Math.min(MAX, cols * rows));
  }
  function layout() {
    const area = $("tiles-area").getBoundingClientRect();
    const n = Math.max(tiles.length, 1);
    let best = { side: 0, cols: 1 };
    for (let c = 1; c <= n; c++) {
      const rows = Math.ceil(n / c);
      const side = Math.floor(Math.min((area.width - PAD - GAP * (c - 1)) / c, (area.height - PAD - GAP * (rows - 1)) / rows));
      if (side > best.side) best = { side, cols: c };
    }
    const grid = $("tiles");
    grid.style.gridTemplateColumns = `repeat(${best.cols}, ${best.side}px)`;
    grid.style.setProperty("--tile", `${best.side}px`);
    grid.dataset.cols = best.cols;
    grid.dataset.side = best.side;
    grid.classList.toggle("small-tiles", best.side < 110);
    $("size-label").textContent = `${tile} px · ${tiles.length || size} tiles`;
  }
  // the window, or the key bar growing a line: the tiles follow at once, the page size from the next page on
  new ResizeObserver(() => { layout(); size = fitCount(tile); }).observe($("tiles-area"));

  // -- the page -----------------------------------------------------------------------------------
  function tileEl(t, i) {
    const top = t.top5[0];
    const cap = el("div", { class: "cap" }, el("span", { class: "t1", text: top ? top.label : "—" }),
      el("span", { class: "msp", text: top ? `${Math.round(100 * top.prob)}%` : "" }));
    const d = el("div", { class: "tile", role: "gridcell", "data-i": String(i), "data-assignment": String(t.assignment),
                          "data-image": String(t.image), title: top ? `${i + 1}: ${t.path} · top-1 ${top.label} (MSP ${top.prob.toFixed(2)}) · click: id (${top.label}), again: clear` : t.path },
      el("img", { alt: `image ${t.image}`, draggable: "false" }),
      el("span", { class: "num", text: String(i + 1) }), el("span", { class: "badge" }), cap);
    d.addEventListener("click", (ev) => clickTile(i, ev));
    d.addEventListener("mouseenter", () => { hovered = i; if (peeking) showPeek(); });
    d.addEventListener("mouseleave", () => { if (hovered === i) hovered = null; });
    d.addEventListener("mousemove", (ev) => { if (peeking && hovered === i) loupe(ev); });
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
    $("cursor-at").textContent = t ? `${cursor + 1}/${tiles.length}` : "";
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
    $("empty-summary").textContent = `You reviewed ${progress.done_today} image${progress.done_today === 1 ? "" : "s"} today` +
      (progress.median_seconds === null ? "." : `, a median of ${progress.median_seconds} s each.`);
    const mins = (performance.now() - session.start) / 60000;
    $("empty-pace").textContent = session.tiles ? `This session: ${session.tiles} image${session.tiles === 1 ? "" : "s"} on ` +
      `${session.pages} page${session.pages === 1 ? "" : "s"} in ${mins < 1 ? "under a minute" : `${Math.round(mins)} min`}, ` +
      `${(session.seconds / session.tiles).toFixed(1)} s per image on the page (${Math.round(3600 * session.tiles / Math.max(1, session.seconds))} an hour).` : "";
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
    anchor = null;
    hidePeek();
    // busy: images are waiting but another annotator was leasing them at this instant; the page
    // is asked for again (never the "finished" panel while work is left)
    const busy = !tiles.length && data.busy === true;
    root.classList.toggle("is-empty", !tiles.length && !busy);
    root.classList.toggle("is-busy", busy);
    $("empty").hidden = !!tiles.length || busy;
    if (busy) askAgain();
    document.querySelectorAll("button.decide, #send, #top1-btn").forEach((b) => { b.disabled = !tiles.length; });
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
  function setMark(i, decision, wnids) {
    const t = tiles[i];
    if (!t) return false;
    const note = i === cursor ? $("note").value.trim() : "";
    marks.set(t.assignment, { decision, wnids: wnids || [], note });
    if (i === cursor) $("note").value = "";
    paintTile(i);
    return true;
  }
  function marked(i, decision, wnids) {
    const named = (w) => { const p = tiles[i] && tiles[i].top5.find((x) => x.wnid === w); return p ? p.label : w; };
    const what = decision === "id" ? `id (${(wnids || []).map(named).join(", ")})` : decision;
    status(`Tile ${i + 1}: ${what}. ${marks.size} marked; Enter records the other ${tiles.length - marks.size} as ood.`, "ok");
  }
  function mark(decision, wnids) {
    // the class search may still hold the focus for a moment after its Enter (it is hidden as
    // the mark is made): give it back to the page now, so the next Enter sends the page
    const search = $("search");
    if (search && document.activeElement === search) search.blur();
    if (!setMark(cursor, decision, wnids)) return;
    keepMarks();
    marked(cursor, decision, wnids);
    if (viewing()) closeView();
    if (cursor < tiles.length - 1) moveTo(cursor + 1); else showPanel();
  }
  const topOne = (i) => (tiles[i] && tiles[i].top5.length ? tiles[i].top5[0] : null);
  function markTop1(i) {  // id, with the tile's top-1 class: the most common id answer in one step
    const top = topOne(i);
    if (!top) { status(`Tile ${i + 1} has no top-5 to take the class from: I, then search.`, "error"); return false; }
    return setMark(i, "id", [top.wnid]);
  }
  function clearAt(i) {
    const t = tiles[i];
    if (!t || !marks.delete(t.assignment)) return false;
    paintTile(i);
    return true;
  }
  function clearMark() {
    if (clearAt(cursor)) { keepMarks(); showPanel(); status(`Tile ${cursor + 1}: mark removed.`); }
  }
  function yesTop1() {  // Y: the cursor tile is id, its top-1 class; the cursor moves on
    const top = topOne(cursor);
    if (!top) { status(`Tile ${cursor + 1} has no top-5: I, then search for its class.`, "error"); return; }
    mark("id", [top.wnid]);
  }
  // a click marks the tile id with its top-1 class, or clears the mark it has; shift-click does
  // what the last click did to every tile from that one to this one
  function clickTile(i, ev) {
    if (screen.busy() || !tiles[i]) return;
    if (screen.mode() === "id") screen.leaveId();
    if (ev.shiftKey && anchor !== null && anchor.i !== i) {
      const [a, b] = anchor.i < i ? [anchor.i, i] : [i, anchor.i];
      let n = 0;
      for (let j = a; j <= b; j++) n += (anchor.set ? markTop1(j) : clearAt(j)) ? 1 : 0;
      keepMarks();
      moveTo(i);
      status(`Tiles ${a + 1}–${b + 1}: ${anchor.set ? "id, each with its top-1 class" : "marks removed"} (${n} tile${n === 1 ? "" : "s"}). ` +
             `${marks.size} marked; Enter records the other ${tiles.length - marks.size} as ood.`, "ok");
      return;
    }
    const had = marks.has(tiles[i].assignment);
    const set = had ? !clearAt(i) : markTop1(i);
    anchor = { i, set };
    keepMarks();
    moveTo(i);
    if (set) marked(i, "id", marks.get(tiles[i].assignment).wnids);
    else if (had) status(`Tile ${i + 1}: mark removed.`);
  }

  // -- a tile by its number: digits name it (the cursor goes there as soon as the number can grow
  // no further, after a short pause, or on Enter) -------------------------------------------------
  let number = "", numberTimer = 0;
  function typeNumber(d) {
    number += d;
    clearTimeout(numberTimer);
    const n = Number(number);
    if (n * 10 > tiles.length || number.length >= 3) { goNumber(); return; }
    status(`Tile ${number}… (another digit, or Enter)`);
    numberTimer = setTimeout(goNumber, 900);
  }
  function goNumber() {
    clearTimeout(numberTimer);
    const n = Number(number);
    number = "";
    if (!n || n > tiles.length) { status(`There is no tile ${n} on this page (1–${tiles.length}).`, "error"); return; }
    moveTo(n - 1);
    status(`Tile ${n}: Y or a click marks it id (${topOne(n - 1) ? topOne(n - 1).label : "no top-5"}), O/U/N/S/I as usual.`);
  }

  // -- peek: V held shows the tile under the mouse (or the cursor's) at full size, over the half of
  // the page away from it; moving the mouse over the tile moves the loupe ----------------------------
  let peeking = false, hovered = null, peekAt = null;
  function peekIndex() { return hovered !== null && tiles[hovered] ? hovered : cursor; }
  function showPeek() {
    const i = peekIndex(), t = tiles[i], d = $("tiles").children[i];
    if (!t || !d) return;
    const area = $("tiles-area").getBoundingClientRect(), r = d.getBoundingClientRect();
    const onLeft = r.left + r.width / 2 < area.left + area.width / 2;  // the tile is on the left: the peek goes right
    const box = $("peek");
    box.classList.toggle("right", onLeft);
    box.classList.toggle("left", !onLeft);
    box.hidden = false;
    root.classList.add("peeking");
    const img = $("peek-img");
    if (peekAt !== t.image) {
      peekAt = t.image;
      img.removeAttribute("src");
      if (thumbs.has(t.image)) img.src = thumbs.get(t.image);  // at once, until the full file arrives
      const full = new Image();
      full.onload = () => { if (peekAt === t.image) { img.src = full.src; img.dataset.full = "1"; } };
      img.dataset.full = "";
      full.src = imageUrl(t.image, "full");
      img.dataset.image = t.image;
    }
    $("peek-info").textContent = `Tile ${i + 1} · ${t.width}×${t.height} · top-1 ${t.top5[0] ? t.top5[0].label : "—"} · move over the tile to zoom · release V`;
    fitPeek();
  }
  function fitPeek() {  // the whole image, as large as the peek allows
    const img = $("peek-img"), box = $("peek-stage").getBoundingClientRect(), t = tiles[peekIndex()];
    if (!t) return;
    const s = Math.min(box.width / t.width, box.height / t.height);
    img.style.width = `${t.width}px`;
    img.style.height = `${t.height}px`;
    img.style.transform = `translate(${(box.width - t.width * s) / 2}px, ${(box.height - t.height * s) / 2}px) scale(${s})`;
    $("peek").dataset.zoom = "fit";
  }
  function loupe(ev) {  // the image at full resolution (at least twice the fitted size), the pointed spot in the middle
    const i = peekIndex(), t = tiles[i], d = $("tiles").children[i];
    if (!t || !d) return;
    const r = d.getBoundingClientRect(), box = $("peek-stage").getBoundingClientRect();
    const fit = Math.min(box.width / t.width, box.height / t.height);
    const s = Math.max(1, 2 * fit);
    // the tile shows the image cropped to a square (object-fit: cover): map the pointer back to the image
    const side = Math.min(t.width, t.height), ox = (t.width - side) / 2, oy = (t.height - side) / 2;
    const u = ox + side * (ev.clientX - r.left) / r.width, v = oy + side * (ev.clientY - r.top) / r.height;
    $("peek-img").style.transform = `translate(${box.width / 2 - u * s}px, ${box.height / 2 - v * s}px) scale(${s})`;
    $("peek").dataset.zoom = s === 1 ? "1:1" : `${s.toFixed(2)}x`;
  }
  function hidePeek() {
    peeking = false;
    $("peek").hidden = true;
    root.classList.remove("peeking");
  }
  const typing = (e) => e.target && (e.target.tagName === "INPUT" || e.target.tagName === "TEXTAREA");
  window.addEventListener("keydown", (e) => {
    if ((e.key !== "v" && e.key !== "V") || e.ctrlKey || e.metaKey || e.altKey || typing(e) || screen.mode() === "id") return;
    if (!$("help").hidden || !tiles.length) return;
    e.preventDefault();
    e.stopImmediatePropagation();  // held, not typed ahead
    if (!peeking) { peeking = true; showPeek(); }
  }, true);
  window.addEventListener("keyup", (e) => { if ((e.key === "v" || e.key === "V") && peeking) hidePeek(); });
  window.addEventListener("blur", () => { if (peeking) hidePeek(); });


  let busyTries = 0, saveTile = false;
  function askAgain() {
    busyTries += 1;
    status(`Others are taking images from the queue at this moment; asking again (try ${busyTries})…`);
    setTimeout(() => screen.run(() => load()), Math.min(3000, 300 * busyTries));
  }

  async function load() {
    status("Loading…");
    try {
      // a changed tile side is remembered by a POST (with the CSRF token), never by a GET
      render(await (saveTile ? call(api.next, { size, tile }) : call(`${api.next}?size=${size}`)));
      saveTile = false;
      if (root.classList.contains("is-busy")) return true;
      busyTries = 0;
      const kept = Number(root.dataset.restored);
      status(kept ? `Your ${kept} mark${kept === 1 ? "" : "s"} on this page from before ${kept === 1 ? "is" : "are"} back; Enter sends the page.`
        : tiles.length ? "Ready: click a tile (or Y) for id with its top-1, a number goes to a tile, hold V to peek, Enter sends the rest as ood. ? for all keys." : "", kept ? "ok" : undefined);
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
      session.pages += 1;
      session.tiles += tiles.length;
      session.seconds += (performance.now() - shownAt) / 1000;
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

  // + more, smaller tiles; - fewer, larger ones. The page is fetched again at the new size (its
  // marks stay), and the side is remembered for the annotator on the server.
  async function resize(delta) {
    const i = TILES.findIndex((n) => n >= tile);
    const at = i < 0 ? TILES.length - 1 : i;
    const next = TILES[Math.max(0, Math.min(TILES.length - 1, at - delta))];
    if (next === tile) { status(`${tile} px tiles are the ${delta > 0 ? "smallest" : "largest"} there are.`); return true; }
    tile = next;
    size = fitCount(tile);
    saveTile = true;
    const ok = await load();
    if (ok) status(`${tile} px tiles: ${tiles.length} on this page (as many as fit). Remembered for you.`, "ok");
    return ok;
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
      Enter: () => (number ? goNumber() : send()), z: () => undo(), y: () => yesTop1(), "+": () => resize(1), "=": () => resize(1), "-": () => resize(-1),
      Backspace: () => clearMark(), Delete: () => clearMark(), m: () => moreLikeThis(),
    },
    before: (e, mode) => {
      if (viewing()) {
        if (e.key === "Escape" || e.key === " ") { closeView(); return true; }
        if (zoom.key(e, mode !== "id")) return true;
      }
      if (mode === "id") return false;
      if (/^[0-9]$/.test(e.key) && !viewing() && tiles.length) { typeNumber(e.key); return true; }
      if (e.key === "Escape" && number) { number = ""; clearTimeout(numberTimer); status("Tile number cancelled."); return true; }
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
  $("top1-btn").addEventListener("click", (ev) => { ev.currentTarget.blur(); if (!screen.busy()) yesTop1(); });
  size = fitCount(tile);
  screen.run(() => load());
})();
