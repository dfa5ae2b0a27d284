// Zoom and pan for one image in a stage (review and adjudication screens): fit, 1:1, 2x, wheel
// zoom about the pointer, drag to pan. Beyond the fitted size the full-resolution file is shown.
(function () {
  "use strict";
  const MIN = 0.05, MAX = 16;

  window.OODZoom = function (stage, img, label) {
    let w = 0, h = 0, s = 1, tx = 0, ty = 0, mode = "fit";
    let fullSrc = "", full = false, drag = null;

    function box() { return stage.getBoundingClientRect(); }
    function fitScale() { const r = box(); return w && h ? Math.min(r.width / w, r.height / h) : 1; }
    function apply() {
      img.style.transform = `translate(${tx}px, ${ty}px) scale(${s})`;
      stage.dataset.zoom = mode;
      stage.dataset.scale = s.toFixed(4);
      stage.classList.toggle("zoomed", mode !== "fit");
      if (label) label.textContent = mode === "fit" ? `fit (${Math.round(100 * s)}%)` : mode === "1:1" ? "1:1" : mode === "2x" ? "2x" : `${Math.round(100 * s)}%`;
      if (!full && fullSrc && s > fitScale() * 1.01) { full = true; img.src = fullSrc; }  // more pixels than the screen-sized file has
    }
    function centre() { const r = box(); tx = (r.width - w * s) / 2; ty = (r.height - h * s) / 2; }
    function scaleAbout(ns, cx, cy) {
      ns = Math.min(MAX, Math.max(MIN, ns));
      tx = cx - (cx - tx) * ns / s;
      ty = cy - (cy - ty) * ns / s;
      s = ns;
    }
    function set(which) {
      const r = box();
      if (which === "fit") { s = fitScale(); centre(); } else {
        scaleAbout(which === "2x" ? 2 : 1, r.width / 2, r.height / 2);
      }
      mode = which;
      apply();
    }
    function zoomBy(factor, cx, cy) {
      const r = box();
      scaleAbout(s * factor, cx === undefined ? r.width / 2 : cx, cy === undefined ? r.height / 2 : cy);
      mode = Math.abs(s - 1) < 1e-3 ? "1:1" : Math.abs(s - 2) < 1e-3 ? "2x" : "custom";
      apply();
    }
    function pan(dx, dy) { tx += dx; ty += dy; if (mode === "fit") mode = "custom"; apply(); }
    function show(src, fullResolution, width, height) {
      w = width || img.naturalWidth || 1; h = height || img.naturalHeight || 1;
      fullSrc = fullResolution || ""; full = false;
      img.style.width = `${w}px`; img.style.height = `${h}px`;
      img.src = src;
      set("fit");
    }

    stage.addEventListener("wheel", (e) => {
      if (!w) return;
      e.preventDefault();
      const r = box();
      zoomBy(e.deltaY < 0 ? 1.25 : 0.8, e.clientX - r.left, e.clientY - r.top);
    }, { passive: false });
    stage.addEventListener("pointerdown", (e) => {
      if (e.button !== 0 || !w) return;
      drag = { x: e.clientX, y: e.clientY };
      stage.setPointerCapture(e.pointerId);
      stage.classList.add("dragging");
    });
    stage.addEventListener("pointermove", (e) => {
      if (!drag) return;
      pan(e.clientX - drag.x, e.clientY - drag.y);
      drag = { x: e.clientX, y: e.clientY };
    });
    const stop = () => { drag = null; stage.classList.remove("dragging"); };
    stage.addEventListener("pointerup", stop);
    stage.addEventListener("pointercancel", stop);
    stage.addEventListener("dblclick", () => set(mode === "fit" ? "1:1" : "fit"));
    new ResizeObserver(() => { if (mode === "fit") set("fit"); }).observe(stage);

    // keys the screens share: F fit, 1 1:1, 2 2x, + and - zoom, arrows pan (returns true if used)
    function key(e, digitsFree) {
      const k = e.key;
      if (k === "f" || k === "F" || (digitsFree && k === "0")) { set("fit"); return true; }
      if (digitsFree && k === "1") { set("1:1"); return true; }
      if (digitsFree && k === "2") { set("2x"); return true; }
      if (k === "+" || k === "=") { zoomBy(1.25); return true; }
      if (k === "-" || k === "_") { zoomBy(0.8); return true; }
      if (mode !== "fit" && k.startsWith("Arrow")) {
        const d = 80;
        pan(k === "ArrowLeft" ? d : k === "ArrowRight" ? -d : 0, k === "ArrowUp" ? d : k === "ArrowDown" ? -d : 0);
        return true;
      }
      return false;
    }
    return { show, set, zoomBy, pan, key, mode: () => mode, scale: () => s };
  };
})();
