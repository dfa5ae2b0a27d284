// The embedding map: every image a point, coloured by final label, class or predicted ID class.
// Drag draws a box, Shift+drag a lasso; the points inside are selected and "Open the selection"
// shows them as thumbnails with the browser's actions. Esc clears the selection.
(function () {
  "use strict";
  const canvas = document.getElementById("map");
  if (!canvas) return;
  const $ = (id) => document.getElementById(id);
  const ctx = canvas.getContext("2d");
  const LABELS = { ood: "#3fb950", id: "#f85149", unclear: "#d29922", not_target: "#a371f7", "": "#8b98a5" };
  const LABEL_NAMES = { ood: "ood", id: "id", unclear: "unclear", not_target: "not target", "": "not decided" };
  let pts = null, selected = new Set(), drag = null, colourBy = "label";
  const PAD = 10;

  function hue(key) {  // a stable colour per class
    let h = 0;
    for (const c of String(key)) h = (h * 31 + c.charCodeAt(0)) >>> 0;
    return `hsl(${h % 360}, 70%, 60%)`;
  }
  function colour(i) {
    if (colourBy === "label") return LABELS[pts.label[i]] || LABELS[""];
    return hue(colourBy === "cls" ? pts.cls[i] : pts.top1[i]);
  }
  function size() {
    const r = canvas.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(r.width * dpr); canvas.height = Math.round(r.height * dpr);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return r;
  }
  function toScreen(i, r) { return [PAD + pts.x[i] * (r.width - 2 * PAD), PAD + (1 - pts.y[i]) * (r.height - 2 * PAD)]; }
  function draw() {
    const r = size();
    ctx.clearRect(0, 0, r.width, r.height);
    const rad = pts.ids.length > 20000 ? 1.2 : pts.ids.length > 2000 ? 2 : 3.5;
    for (let i = 0; i < pts.ids.length; i++) {
      const [x, y] = toScreen(i, r);
      ctx.fillStyle = colour(i);
      ctx.globalAlpha = selected.size && !selected.has(pts.ids[i]) ? 0.35 : 1;
      ctx.beginPath(); ctx.arc(x, y, selected.has(pts.ids[i]) ? rad + 1.5 : rad, 0, 2 * Math.PI); ctx.fill();
    }
    ctx.globalAlpha = 1;
    if (drag) {
      ctx.strokeStyle = "#ffd54a"; ctx.lineWidth = 1.5; ctx.setLineDash([4, 3]);
      ctx.beginPath();
      if (drag.lasso) { drag.path.forEach(([x, y], k) => (k ? ctx.lineTo(x, y) : ctx.moveTo(x, y))); ctx.closePath(); }
      else ctx.rect(drag.x0, drag.y0, drag.x1 - drag.x0, drag.y1 - drag.y0);
      ctx.stroke(); ctx.setLineDash([]);
    }
    $("map-selected").textContent = `${selected.size} selected`;
    $("open-selection").disabled = selected.size === 0;
    $("map-ids").value = [...selected].join(",");
  }
  function legend() {
    const items = colourBy === "label" ? Object.entries(LABEL_NAMES).map(([k, n]) => [LABELS[k], n])
      : Object.entries(counts(colourBy)).sort((a, b) => b[1] - a[1]).slice(0, 12)
        .map(([k]) => [hue(k), (colourBy === "cls" ? pts.class_names[k] : pts.top1_names[k]) || k]);
    $("legend").replaceChildren(...items.map(([c, n]) => {
      const li = document.createElement("li"), sw = document.createElement("span");
      sw.className = "sw"; sw.style.background = c; li.append(sw, document.createTextNode(n)); return li;
    }));
  }
  function counts(field) { const out = {}; pts[field].forEach((v) => { out[v] = (out[v] || 0) + 1; }); return out; }

  function inside(x, y, poly) {  // even-odd rule
    let c = false;
    for (let i = 0, j = poly.length - 1; i < poly.length; j = i++) {
      const [xi, yi] = poly[i], [xj, yj] = poly[j];
      if ((yi > y) !== (yj > y) && x < ((xj - xi) * (y - yi)) / (yj - yi) + xi) c = !c;
    }
    return c;
  }
  function pick() {
    const r = canvas.getBoundingClientRect();
    selected = new Set();
    const [x0, x1] = [Math.min(drag.x0, drag.x1), Math.max(drag.x0, drag.x1)];
    const [y0, y1] = [Math.min(drag.y0, drag.y1), Math.max(drag.y0, drag.y1)];
    for (let i = 0; i < pts.ids.length; i++) {
      const [x, y] = toScreen(i, r);
      if (drag.lasso ? inside(x, y, drag.path) : x >= x0 && x <= x1 && y >= y0 && y <= y1) selected.add(pts.ids[i]);
    }
  }
  function at(ev) { const r = canvas.getBoundingClientRect(); return [ev.clientX - r.left, ev.clientY - r.top]; }
  canvas.addEventListener("pointerdown", (ev) => {
    const [x, y] = at(ev);
    drag = { x0: x, y0: y, x1: x, y1: y, lasso: ev.shiftKey, path: [[x, y]] };
    canvas.setPointerCapture(ev.pointerId);
  });
  canvas.addEventListener("pointermove", (ev) => {
    if (!drag) return;
    const [x, y] = at(ev);
    drag.x1 = x; drag.y1 = y;
    if (drag.lasso) drag.path.push([x, y]);
    draw();
  });
  canvas.addEventListener("pointerup", () => { if (!drag) return; pick(); drag = null; draw(); });
  document.addEventListener("keydown", (ev) => { if (ev.key === "Escape") { selected = new Set(); draw(); } });
  window.addEventListener("resize", () => pts && draw());
  const by = $("colour-by");
  if (by) by.addEventListener("change", () => { colourBy = by.value; legend(); draw(); });

  fetch(canvas.dataset.points, { credentials: "same-origin", headers: { Accept: "application/json" } })
    .then((r) => r.json().then((d) => { if (!r.ok) throw new Error(d.error || `server answered ${r.status}`); return d; }))
    .then((d) => {
      pts = d;
      $("map-count").textContent = `${d.total} images${d.total > d.ids.length ? ` (${d.ids.length} drawn)` : ""}`;
      canvas.dataset.ready = "1";
      legend(); draw();
    })
    .catch((e) => { $("map-count").textContent = `Could not load the map: ${e.message}`; });
})();
