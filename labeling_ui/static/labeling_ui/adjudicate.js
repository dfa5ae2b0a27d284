// Adjudication by keys, with the review screen's controller (screen.js): O/U/N record the final
// decision; I, then 1-5 (a top-5 class; Shift adds more) or / (search every ID class) and Enter
// record "id"; G gold; T note; F / 1 / 2, the wheel and dragging zoom and pan the image.
(function () {
  "use strict";
  const root = document.getElementById("adjudication");
  if (!root) return;
  const $ = (id) => document.getElementById(id);
  const photo = $("photo");
  const zoom = window.OODZoom($("stage"), photo, $("zoom-level"));
  zoom.show(photo.dataset.view, photo.dataset.full, Number(photo.dataset.width), Number(photo.dataset.height));
  const top5 = [...document.querySelectorAll("#top5 li")].map((li) => ({ wnid: li.dataset.wnid, label: li.querySelector("strong").textContent }));

  const screen = window.OODScreen({
    root, classesUrl: root.dataset.classes, idWithoutTop5: true, typeAhead: false,
    idPrompt: "ID visible: 1–5 for a top-5 class (Shift adds more), / to search every ID class, Enter records, Esc cancels.",
    top5: () => top5,
    record: (decision, wnids) => {
      $("adj-decision").value = decision;
      $("adj-wnids").value = (wnids || []).join(" ");
      screen.status(`Recording ${decision}${wnids && wnids.length ? ` (${wnids.join(", ")})` : ""}…`);
      $("adj-form").submit();
      return new Promise(() => {});  // the page reloads with the next image: busy until then
    },
    direct: { o: "ood", u: "unclear", n: "not_target" },
    keys: {
      g: () => { $("adj-gold").checked = !$("adj-gold").checked; screen.status($("adj-gold").checked ? "Will also be gold." : "Not gold."); },
    },
    before: (e, mode) => zoom.key(e, mode !== "id"),
  });
  document.querySelectorAll("button[data-zoom]").forEach((b) => b.addEventListener("click", () => { zoom.set(b.dataset.zoom); b.blur(); }));
})();
