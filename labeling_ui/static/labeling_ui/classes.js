// Flagged classes: map an unmapped folder to a WordNet noun by searching (↑/↓ and Enter, or click);
// the server ranks the nouns by the class search's rule (pipelines/classes/search.py), the typed text is marked.
(function () {
  "use strict";
  document.querySelectorAll("form.class-map").forEach((form) => {
    const input = form.querySelector(".noun-search"), list = form.querySelector(".noun-results");
    const wnid = form.querySelector(".map-wnid"), chosen = form.querySelector(".chosen-noun"), button = form.querySelector(".map-button");
    let results = [], hl = 0, timer = null, seq = 0;
    function choose(n) {
      wnid.value = n.wnid;
      chosen.textContent = `Chosen: ${n.label} (${n.wnid}) — ${n.gloss}`;
      button.disabled = false;
      list.replaceChildren();
    }
    let typed = "", stale = false;
    function show() {
      list.replaceChildren(...results.map((n, i) => {
        const li = window.OODClassSearch.resultRow({ name: n.label, lemmas: n.lemmas, gloss: n.gloss, wnid: n.wnid }, typed);
        li.className = i === hl ? "hl" : "";
        li.dataset.tier = n.tier;
        li.addEventListener("mousedown", (e) => { e.preventDefault(); choose(n); });
        return li;
      }));
    }
    async function search() {
      const mine = ++seq, q = input.value.trim();
      if (!q) { stale = false; results = []; show(); return; }
      const r = await fetch(`${input.dataset.api}?q=${encodeURIComponent(q)}`, { credentials: "same-origin" });
      const data = await r.json().catch(() => ({}));
      if (mine !== seq) return;  // a later key's answer wins
      if (!r.ok) { chosen.textContent = data.error || `search failed (${r.status})`; return; }
      stale = false; typed = q; results = data.nouns; hl = 0; show();
    }
    input.addEventListener("input", () => { stale = true; clearTimeout(timer); timer = setTimeout(search, 150); });
    input.addEventListener("keydown", (e) => {
      if (e.key === "ArrowDown" || e.key === "ArrowUp") {
        e.preventDefault();
        if (results.length) { hl = (hl + (e.key === "ArrowDown" ? 1 : -1) + results.length) % results.length; show(); }
      } else if (e.key === "Enter") {
        // the first row for the text as typed: a search still on its way is finished first
        e.preventDefault();
        if (stale) { clearTimeout(timer); search().then(() => { if (results[hl]) choose(results[hl]); }); } else if (results[hl]) choose(results[hl]);
      }
    });
  });
})();

// Accept several classes at once: the ticked boxes belong to the bulk form; its button counts them.
(function () {
  "use strict";
  const form = document.getElementById("bulk-accept");
  if (!form) return;
  const picks = () => [...document.querySelectorAll("input.pick:not(:disabled)")];
  const all = document.getElementById("select-page"), button = document.getElementById("accept-selected"), count = document.getElementById("selected-count");
  function update() {
    const n = picks().filter((b) => b.checked).length;
    count.textContent = String(n);
    button.disabled = n === 0;
    all.checked = n > 0 && n === picks().length;
  }
  document.addEventListener("change", (e) => { if (e.target.classList && e.target.classList.contains("pick")) update(); });
  all.addEventListener("change", () => { picks().forEach((b) => { b.checked = all.checked; }); update(); });
  update();
})();
