// Adjudication by keys, with the review screen's controller (screen.js): O/U/N record the final
// decision; I, then 1-5 (a top-5 class; Shift adds more) or / (search every ID class) and Enter
// record "id"; G gold; T note; Z undoes the last adjudication; F / 1 / 2, the wheel and dragging
// zoom and pan the image. Decisions and undos are JSON calls: the next conflict (or the image
// taken back) is drawn in place, without reloading the page.
(function () {
  "use strict";
  const root = document.getElementById("adjudication");
  if (!root) return;
  const $ = (id) => document.getElementById(id);
  const { el } = window.OODScreen;
  const imageUrl = (id, variant) => `${root.dataset.images}${id}/${variant}`;
  const photo = $("photo");
  const zoom = window.OODZoom($("stage"), photo, $("zoom-level"));
  const labels = {};
  document.querySelectorAll("button.decide").forEach((b) => { labels[b.dataset.decision] = b.textContent.replace(/^\s*\S+\s*/, "").trim(); });
  const when = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  let state = JSON.parse($("adj-data").textContent);
  let top5 = [];

  function message(text, kind) {
    $("adj-messages").replaceChildren(el("li", { class: `msg-${kind}`, text }));
  }

  function reviewRow(r) {
    const answer = el("div", { class: "adj-answer" }, el("span", { class: `adj-decision d-${r.decision}`, text: labels[r.decision] || r.decision }));
    for (const c of r.classes) answer.append(" ", el("span", { class: "adj-class" }, el("strong", { text: c.label }), ` (${c.wnid})`));
    const meta = [r.at ? when.format(new Date(r.at)) : "", r.seconds !== null ? `${r.seconds} s` : ""].filter(Boolean).join(" · ");
    return el("li", { "data-annotator": r.annotator },
      el("div", { class: "adj-who" }, el("strong", { text: r.annotator }), el("span", { class: "muted small", text: meta })),
      answer,
      r.note ? el("div", { class: "adj-note", text: `“${r.note}”` }) : null);
  }

  function draw(st) {
    state = st;
    screen.leaveId();
    const p = st.item;
    const n = st.waiting;
    $("waiting").textContent = `${n} image${n === 1 ? "" : "s"} waiting for adjudication`;
    $("undoable").textContent = st.undoable ? `· Z undoes ${st.undoable === 50 ? "50+" : st.undoable}` : "";
    $("adj-undo").disabled = !st.undoable;
    for (const id of ["ood-class", "adj-reviews-box", "top5-box", "adj-form"]) $(id).hidden = !p;
    $("empty").hidden = !!p;
    photo.hidden = !p;
    root.classList.toggle("is-empty", !p);
    document.querySelectorAll("button.decide, .zoom-keys button").forEach((b) => { b.disabled = !p; });
    // a gold image stays gold: its box shows ticked and cannot be unticked, and a line says what deciding it means
    $("adj-note").value = ""; $("adj-gold").checked = !!(p && p.gold);
    $("adj-note").disabled = !p; $("adj-gold").disabled = !p || !!p.gold;
    $("adj-gold-note").hidden = !(p && p.gold);
    if (!p) {
      root.dataset.item = ""; $("adj-item").value = ""; top5 = [];
      $("photo-size").textContent = ""; $("photo-path").textContent = ""; $("zoom-level").textContent = "";
      photo.removeAttribute("src"); delete photo.dataset.image;
      return;
    }
    root.dataset.item = p.item; $("adj-item").value = p.item;
    photo.dataset.image = p.image; photo.alt = `image ${p.image}`;
    zoom.show(imageUrl(p.image, "view"), imageUrl(p.image, "full"), p.width, p.height);
    $("photo-size").textContent = `${p.width}×${p.height}`;
    $("photo-path").textContent = `${p.source}:${p.path}`;
    $("ood-source").textContent = `OOD class · ${p.source}`;
    $("ood-label").textContent = p.ood_class.label;
    $("ood-gloss").textContent = p.ood_class.gloss || "";
    $("adj-reviews").replaceChildren(...p.reviews.map(reviewRow));
    top5 = p.top5.map((t) => ({ wnid: t.wnid, label: t.label }));
    $("top5").replaceChildren(...p.top5.map((t) => el("li", { "data-wnid": t.wnid, "data-rank": t.rank },
      el("div", { class: "row" }, el("kbd", { text: String(t.rank) }), el("strong", { text: t.label }),
        el("span", { class: "prob", text: `${Math.round(100 * t.prob)}%` })),
      el("div", { class: "gloss small", text: t.gloss }))));
  }

  async function decide(decision, wnids) {
    if (!state.item) { screen.status("No image is waiting for adjudication.", "error"); return false; }
    const wasGold = !!state.item.gold;
    const body = { item: state.item.item, decision, wnids, note: $("adj-note").value, gold: $("adj-gold").checked };
    screen.status(`Recording ${labels[decision] || decision}…`);
    const r = await screen.call(root.dataset.decide, body);
    const d = r.decided;
    const text = `Image ${d.image}: ${d.decision}${d.classes.length ? `: ${d.classes.join(", ")}` : ""}${d.gold ? (wasGold ? " (gold: its answer now)" : " (now gold)") : ""}. Z takes it back.`;
    draw(r);
    message(text, "success");
    screen.status(text, "ok");
    return true;
  }

  async function undo() {
    const r = await screen.call(root.dataset.undo, {});
    const u = r.undone;
    const text = u.status === "conflict" ? `Image ${u.image} is back as it was: decide it again.`
      : `Image ${u.image} is back as it was (${u.status}).`;
    draw(r);
    message(text, "info");
    screen.status(text, "ok");
    return true;
  }

  const screen = window.OODScreen({
    root, classesUrl: root.dataset.classes, idWithoutTop5: true, typeAhead: false,
    idPrompt: "ID visible: 1–5 for a top-5 class (Shift adds more), type a name (or /) to search every ID class, Enter records, Esc cancels.",
    top5: () => top5,
    record: (decision, wnids) => decide(decision, wnids),
    direct: { o: "ood", u: "unclear", n: "not_target" },
    keys: {
      g: () => {
        if (!state.item) return;
        if (state.item.gold) { screen.status("This image is gold already: the decision you record becomes its answer."); return; }
        $("adj-gold").checked = !$("adj-gold").checked;
        screen.status($("adj-gold").checked ? "Will also be gold." : "Not gold.");
      },
      z: () => undo(),
    },
    before: (e, mode) => zoom.key(e, mode !== "id"),
  });
  $("adj-form").addEventListener("submit", (e) => e.preventDefault());  // Enter in the note goes back to the keys
  $("adj-undo").addEventListener("click", (e) => { e.currentTarget.blur(); if (!screen.busy()) screen.run(undo); });
  document.querySelectorAll("button[data-zoom]").forEach((b) => b.addEventListener("click", () => { zoom.set(b.dataset.zoom); b.blur(); }));
  draw(state);
})();
