// Adjudication by keys, as on the review screen: O/U/N record the final decision; I, then 1-5 (a
// top-5 class; Shift adds more) or / (search every ID class) and Enter record "id"; G gold; T note;
// F / 1 / 2, the wheel and dragging zoom and pan the image.
(function () {
  "use strict";
  const root = document.getElementById("adjudication");
  if (!root) return;
  const $ = (id) => document.getElementById(id);
  const photo = $("photo");
  const zoom = window.OODZoom($("stage"), photo, $("zoom-level"));
  zoom.show(photo.dataset.view, photo.dataset.full, Number(photo.dataset.width), Number(photo.dataset.height));
  let mode = "decide", chosen = [], sent = false;
  const top5 = [...document.querySelectorAll("#top5 li")].map((li) => ({ wnid: li.dataset.wnid, label: li.querySelector("strong").textContent }));

  function status(text, kind) { const s = $("status"); s.textContent = text; s.className = "status" + (kind ? " " + kind : ""); }
  function submit(decision, wnids) {
    if (sent) return;
    sent = true;
    $("adj-decision").value = decision;
    $("adj-wnids").value = (wnids || []).join(" ");
    status(`Recording ${decision}${wnids && wnids.length ? ` (${wnids.join(", ")})` : ""}…`);
    $("adj-form").submit();
  }
  function showChosen() {
    const box = $("chosen");
    box.hidden = !chosen.length;
    box.textContent = chosen.length ? `Chosen: ${chosen.map((c) => c.label).join(", ")} — Enter records, Esc cancels` : "";
  }
  function enterId() { mode = "id"; chosen = []; root.classList.add("id-mode"); $("id-search").hidden = false; showChosen();
    status("ID visible: 1–5 for a top-5 class (Shift adds more), / to search every ID class, Enter records, Esc cancels."); }
  function leaveId() { mode = "decide"; chosen = []; root.classList.remove("id-mode"); $("id-search").hidden = true; idSearch.clear();
    showChosen(); document.querySelectorAll("#top5 li.picked").forEach((li) => li.classList.remove("picked")); }
  function pick(wnid, label, more) {
    if (!chosen.some((c) => c.wnid === wnid)) chosen.push({ wnid, label });
    const li = document.querySelector(`#top5 li[data-wnid="${wnid}"]`);
    if (li) li.classList.add("picked");
    showChosen();
    if (!more) submit("id", chosen.map((c) => c.wnid));
  }
  const idSearch = window.OODIdSearch(root.dataset.classes, $("search"), $("results"), (wnid, label, more) => {
    pick(wnid, label, more);
    if (more) idSearch.clear();
  }, (msg) => status(msg, "error"));
  $("search").addEventListener("focus", () => root.classList.add("searching"));
  $("search").addEventListener("blur", () => root.classList.remove("searching"));
  document.querySelectorAll("button.decide").forEach((b) => b.addEventListener("click", () => {
    if (b.dataset.decision === "id") enterId(); else submit(b.dataset.decision);
  }));
  document.querySelectorAll("button[data-zoom]").forEach((b) => b.addEventListener("click", () => { zoom.set(b.dataset.zoom); b.blur(); }));
  $("top5").addEventListener("click", (ev) => {
    const li = ev.target.closest("li[data-wnid]");
    if (li && mode === "id") pick(li.dataset.wnid, li.querySelector("strong").textContent, ev.shiftKey);
  });

  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey || sent) return;
    if (e.target === $("adj-note")) { if (e.key === "Enter" || e.key === "Escape") { e.preventDefault(); $("adj-note").blur(); } return; }
    if (e.target === $("search")) {
      if (e.key === "ArrowDown" || e.key === "ArrowUp") { e.preventDefault(); idSearch.move(e.key === "ArrowDown" ? 1 : -1); }
      else if (e.key === "Enter") {
        e.preventDefault();
        const c = idSearch.current();
        if (c) { pick(c[0], c[1], e.shiftKey); if (e.shiftKey) idSearch.clear(); }
        else if (chosen.length) submit("id", chosen.map((x) => x.wnid));
      } else if (e.key === "Escape") { e.preventDefault(); $("search").blur(); }
      return;
    }
    if (zoom.key(e, mode !== "id")) { e.preventDefault(); return; }
    const k = e.key.toLowerCase();
    if (mode === "id") {
      const digit = /^Digit([1-5])$/.exec(e.code) || /^Numpad([1-5])$/.exec(e.code);
      if (digit) { e.preventDefault(); const t = top5[Number(digit[1]) - 1]; if (t) pick(t.wnid, t.label, e.shiftKey); return; }
      if (e.key === "/") { e.preventDefault(); idSearch.open(); return; }
      if (e.key === "Enter") { e.preventDefault(); if (chosen.length) submit("id", chosen.map((c) => c.wnid)); return; }
      if (e.key === "Escape") { e.preventDefault(); leaveId(); status("ID choice cancelled."); return; }
    }
    const direct = { o: "ood", u: "unclear", n: "not_target" }[k];
    if (direct) { e.preventDefault(); leaveId(); submit(direct); }
    else if (k === "i") { e.preventDefault(); enterId(); }
    else if (k === "g") { e.preventDefault(); $("adj-gold").checked = !$("adj-gold").checked; status($("adj-gold").checked ? "Will also be gold." : "Not gold."); }
    else if (k === "t") { e.preventDefault(); $("adj-note").focus(); }
  });
})();
